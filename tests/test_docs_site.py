"""The manual's site: `mkdocs build --strict`, every public name in its reference, a browser.

The site is built once into a temporary folder (a broken link, a missing
page, a reference that does not resolve or a docstring whose `Args:` name no
parameter fails the build), served on 127.0.0.1 by `http.server` in a
thread, and opened in headless Chromium, driven through the DevTools
protocol over a pipe (`--remote-debugging-pipe`: no port, no driver, no
package beyond the browser). The home page and an API reference page are
screenshot into the test's temporary folder, and their rendered DOM must
show the navigation, the search box, a heading and a reference entry's
signature; a search typed in the box must find a page.

Without mkdocs (`pip install -e '.[docs]'`) or Chromium (`apt-get install
chromium`) the tests skip, and fail instead under `EXECUTOR_REQUIRE_DOCS=1`,
which CI sets.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import html
import importlib.util
import inspect
import itertools
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import executor
import executor.testing

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("EXECUTOR_REQUIRE_DOCS") == "1"
BUILD_TIMEOUT = 600
BROWSER_TIMEOUT = 60

# The manual's topic pages, as the navigation must link them.
TOPICS = [
    "getting-started/",
    "commands/",
    "local/",
    "docker/",
    "ssh/",
    "ray/",
    "policies/",
    "shells/",
    "tools/",
    "toolset/",
    "mcp/",
    "cli/",
    "testing/",
    "architecture/",
    "faults/",
    "benchmarks/",
    "development/",
    "reference/",
]


def chromium() -> str | None:
    """The Chromium program: `EXECUTOR_CHROMIUM`, else `chromium` on the PATH."""
    return os.environ.get("EXECUTOR_CHROMIUM") or shutil.which("chromium")


def require_docs() -> str:
    """The Chromium program, once mkdocs and Chromium are both here.

    Skips without them; fails instead under `EXECUTOR_REQUIRE_DOCS=1`.
    """
    missing = []
    if importlib.util.find_spec("mkdocs") is None:
        missing.append("mkdocs is not installed: pip install -e '.[docs]'")
    program = chromium()
    if program is None:
        missing.append("no chromium: apt-get install chromium (or set EXECUTOR_CHROMIUM)")
    if missing:
        if REQUIRED:
            pytest.fail(f"EXECUTOR_REQUIRE_DOCS=1, but {'; '.join(missing)}")
        pytest.skip("; ".join(missing))
    assert program is not None
    return program


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with `mkdocs build --strict` into a temporary folder."""
    require_docs()
    folder = tmp_path_factory.mktemp("site") / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr}{built.stdout}"
    return folder


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Say nothing: the test's output is the browser's findings."""


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site's address, served on 127.0.0.1 by a thread until the module's tests end."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _high(fd: int) -> int:
    """`fd` moved to a descriptor number of 100 or more."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(fd)
    return moved


class Browser:
    """Headless Chromium, driven through the DevTools protocol on a pipe.

    `--remote-debugging-pipe` reads commands on the browser's descriptor 3
    and writes answers on its descriptor 4, each a JSON message ended by a
    NUL byte. One page (a target, attached with `flatten`) is all the tests
    need.
    """

    def __init__(self, program: str, profile: Path) -> None:
        # Far above 3 and 4, so that the shell's redirections below cannot
        # overwrite one end with the other.
        to_browser, self._commands = (_high(fd) for fd in os.pipe())
        self._answers, from_browser = (_high(fd) for fd in os.pipe())
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile / 'data'}",
            "--window-size=1280,900",
            "--remote-debugging-pipe",
        ]
        self.log = profile / "chromium.log"
        # A trampoline puts the two pipe ends at the descriptors Chromium reads
        # and writes, then becomes Chromium (a wrapper script on Debian). The
        # shell could not: its redirections take descriptors up to 9 only.
        trampoline = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4);"
            " os.execv(sys.argv[3], sys.argv[3:])"
        )
        arguments = [str(to_browser), str(from_browser), program, *flags, "about:blank"]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", trampoline, *arguments],
                pass_fds=(to_browser, from_browser),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        os.close(to_browser)
        os.close(from_browser)
        self._ids = itertools.count(1)
        self._pending = b""
        self._session: str | None = None
        self._offline: dict[str, Path] = {}
        try:
            target = self.send("Target.createTarget", url="about:blank")["targetId"]
            attached = self.send("Target.attachToTarget", targetId=target, flatten=True)
            self._session = attached["sessionId"]
            self.send("Page.enable")
            # The page's own size, whatever the window's frame takes of it.
            self.send(
                "Emulation.setDeviceMetricsOverride",
                width=1280,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    def _write(self, method: str, params: dict[str, Any]) -> int:
        """Send one command; its id."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        try:
            os.write(self._commands, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"Chromium is gone before {method}:\n{self.said()}") from None
        return message_id

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer.

        A request paused on the way (`offline`) is answered meanwhile; other
        events are dropped.
        """
        message_id = self._write(method, params)
        deadline = time.monotonic() + BROWSER_TIMEOUT
        while True:
            while b"\0" not in self._pending:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([self._answers], [], [], max(left, 0))
                if not ready:
                    raise TimeoutError(
                        f"Chromium did not answer {method} in {BROWSER_TIMEOUT} s:\n{self.said()}"
                    )
                data = os.read(self._answers, 1 << 20)
                if not data:
                    raise RuntimeError(f"Chromium closed its pipe before {method}:\n{self.said()}")
                self._pending += data
            raw, _, self._pending = self._pending.partition(b"\0")
            answer = json.loads(raw)
            if answer.get("method") == "Fetch.requestPaused":
                self._answer_paused(answer["params"])
            if answer.get("id") != message_id:
                continue
            if "error" in answer:
                raise RuntimeError(f"{method}: {answer['error']}")
            result: dict[str, Any] = answer["result"]
            return result

    def offline(self, files: dict[str, Path]) -> None:
        """Answer requests for these URLs (`*` a wildcard) with these files, not the network.

        The theme loads its diagram library from a CDN; the tests have no
        network, so the library comes from a file.
        """
        self._offline = dict(files)
        patterns = [{"urlPattern": pattern} for pattern in files]
        self.send("Fetch.enable", patterns=patterns)

    def _answer_paused(self, request: dict[str, Any]) -> None:
        url = request["request"]["url"]
        for pattern, path in self._offline.items():
            if re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), url):
                body = base64.b64encode(path.read_bytes()).decode()
                headers = [{"name": "Content-Type", "value": "text/javascript"}]
                # Not waited for: this runs inside another command's wait.
                self._write(
                    "Fetch.fulfillRequest",
                    {
                        "requestId": request["requestId"],
                        "responseCode": 200,
                        "responseHeaders": headers,
                        "body": body,
                    },
                )
                return
        self._write(
            "Fetch.failRequest", {"requestId": request["requestId"], "errorReason": "Failed"}
        )

    def said(self) -> str:
        """The end of what Chromium wrote on its stdout and stderr."""
        return self.log.read_text(errors="replace")[-4000:]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, seconds: float = BROWSER_TIMEOUT) -> Any:
        """The expression's value once it is truthy; fails after `seconds`."""
        deadline = time.monotonic() + seconds
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                pytest.fail(f"the page never made true: {expression}")
            time.sleep(0.1)
        return value

    def open(self, url: str) -> None:
        """Go to `url` and wait until it and its scripts are loaded."""
        self.send("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the window, written to `path` and returned."""
        png = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(png)
        return png

    def close(self) -> None:
        """Close the browser; kill its process group if it lingers."""
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        # The renderers and the zygote share the browser's process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        os.close(self._commands)
        os.close(self._answers)


@pytest.fixture(scope="module")
def browser(served: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """A headless Chromium with a fresh profile, closed when the module's tests end."""
    program = require_docs()
    opened = Browser(program, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield opened
    finally:
        opened.close()


def png_size_and_colours(png: bytes) -> tuple[int, int, int]:
    """A PNG's width, height and how many distinct byte values its pixel data holds."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    data, offset = b"", 8
    while offset < len(png):
        (length,) = struct.unpack(">I", png[offset : offset + 4])
        kind = png[offset + 4 : offset + 8]
        if kind == b"IDAT":
            data += png[offset + 8 : offset + 8 + length]
        offset += 12 + length
    return width, height, len(set(zlib.decompress(data)))


def squeezed(text: str) -> str:
    """`text` without spaces, backticks and asterisks, to compare a docstring with its page.

    A page's inline tags break words apart differently, and Markdown's code
    spans and emphasis are drawn, not shown.
    """
    return re.sub(r"[\s`*]", "", text)


def text_of(page: str) -> str:
    """A built page's text, tags dropped, entities decoded, without spaces."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return squeezed(html.unescape(re.sub(r"<[^>]+>", " ", body)))


def public_names() -> dict[str, object]:
    """Every public name, by the identifier the reference gives it."""
    names = {f"executor.{name}": getattr(executor, name) for name in executor.__all__}
    for name in executor.testing.__all__:
        names[f"executor.testing.{name}"] = getattr(executor.testing, name)
    return names


def summary(value: object) -> str | None:
    """The first line of a class's or function's docstring, as the page shows it."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return None
    doc = inspect.getdoc(value)
    if not doc:
        return None
    return doc.splitlines()[0]


def test_every_public_name_has_a_reference_entry_with_its_docstring(site: Path) -> None:
    """The site's inventory holds each public name, and its page shows the docstring."""
    from mkdocstrings import Inventory

    with (site / "objects.inv").open("rb") as file:
        inventory = Inventory.parse_sphinx(file)
    names = public_names()
    assert len(names) > 180
    missing = sorted(name for name in names if name not in inventory)
    assert not missing, f"no API reference entry for {missing}: add them to docs/reference/"
    pages: dict[str, str] = {}
    for name, value in names.items():
        uri = inventory[name].uri
        page, _, anchor = uri.partition("#")
        assert page.startswith("reference/"), f"{name} is documented at {uri}, not in reference/"
        assert anchor == name
        if page not in pages:
            pages[page] = text_of((site / page / "index.html").read_text(encoding="utf-8"))
        line = summary(value)
        if line is not None:
            shown = squeezed(line) in pages[page]
            assert shown, f"{name}: its docstring ({line!r}) is not on {page}"


def mermaid_pages() -> dict[str, int]:
    """Each page of the manual that draws diagrams (its address in the site), and how many."""
    found = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        count = sum(line.strip() == "```mermaid" for line in page.read_text().splitlines())
        if count:
            relative = page.relative_to(ROOT / "docs").with_suffix("")
            found["" if relative.name == "index" else f"{relative.as_posix()}/"] = count
    return found


def mermaid_library() -> Path:
    """Mermaid's `mermaid.min.js`, which the theme would load from a CDN.

    `EXECUTOR_MERMAID_JS` names it (.ci/services/chromium.sh fetches it from
    npm); without it the test skips, and fails under `EXECUTOR_REQUIRE_DOCS=1`.
    """
    library = os.environ.get("EXECUTOR_MERMAID_JS")
    if library and Path(library).is_file():
        return Path(library)
    problem = (
        "no mermaid.min.js: set EXECUTOR_MERMAID_JS to one (npm pack mermaid@11, its"
        " package/dist/mermaid.min.js; .ci/services/chromium.sh does)"
    )
    if REQUIRED:
        pytest.fail(f"EXECUTOR_REQUIRE_DOCS=1, but {problem}")
    pytest.skip(problem)


def test_mermaid_fences_become_diagrams(site: Path) -> None:
    """Each ```mermaid block of a page reaches the browser as a diagram, not as code."""
    pages = mermaid_pages()
    assert pages, "no page of the manual draws a diagram"
    for address, count in pages.items():
        built = (site / address / "index.html").read_text(encoding="utf-8")
        assert built.count('<pre class="mermaid">') == count, f"{address}: not {count} diagrams"
        assert "language-mermaid" not in built, f"{address}: a diagram shown as code"


# What a page shows, read from its DOM by the browser.
PAGE_FACTS = """(() => ({
    title: [...(document.querySelector("article h1")?.childNodes ?? [])]
        .filter(node => !node.classList?.contains("headerlink"))
        .map(node => node.textContent).join("").trim(),
    navLinks: [...document.querySelectorAll("nav.md-nav--primary a.md-nav__link")]
        .map(link => new URL(link.href).pathname),
    search: !!document.querySelector("input.md-search__input"),
}))()"""


def test_the_home_page_renders_with_navigation_search_and_content(
    browser: Browser, served: str, tmp_path: Path
) -> None:
    """The home page in Chromium: its heading, a link to every topic, a search that finds."""
    browser.open(served)
    facts = browser.evaluate(PAGE_FACTS)
    assert facts["title"] == "executor"
    assert facts["search"], "no search box"
    linked = {path.removeprefix("/") for path in facts["navLinks"]}
    missing = [topic for topic in TOPICS if topic not in linked]
    assert not missing, f"the navigation does not link {missing}; it links {sorted(linked)}"
    png = browser.screenshot(tmp_path / "home.png")
    width, height, colours = png_size_and_colours(png)
    assert (width, height) == (1280, 900)
    assert colours > 16, "the screenshot is blank"

    # Typed as a reader types: the input event the theme's search listens to.
    browser.evaluate(
        """(() => {
            const box = document.querySelector("input.md-search__input");
            box.focus();
            box.value = "LocalExecutor";
            box.dispatchEvent(new Event("input", {bubbles: true}));
            box.dispatchEvent(new KeyboardEvent("keyup", {bubbles: true, key: "r"}));
        })()"""
    )
    found = browser.wait_for(
        """[...document.querySelectorAll(".md-search-result__item a")]
            .map(link => new URL(link.href).pathname)"""
    )
    assert "/reference/local/" in found, f"the search for LocalExecutor found {found}"
    browser.screenshot(tmp_path / "search.png")


def test_an_api_reference_page_renders_an_entry_with_its_signature(
    browser: Browser, served: str, tmp_path: Path
) -> None:
    """The reference page of LocalExecutor in Chromium: its entry, signature and docstring."""
    browser.open(served + "reference/local/")
    facts = browser.evaluate(PAGE_FACTS)
    assert facts["title"] == "Local executor and sandbox"
    assert facts["search"], "no search box"
    entry = browser.evaluate(
        """(() => {
            const heading = document.getElementById("executor.LocalExecutor");
            const body = heading?.closest(".doc-object") ?? heading?.parentElement;
            return heading && {
                heading: heading.textContent,
                signature: body.querySelector(".doc-signature")?.textContent,
                text: body.textContent,
            };
        })()"""
    )
    assert entry, "no entry with the id executor.LocalExecutor"
    assert "LocalExecutor" in entry["heading"]
    signature = " ".join(entry["signature"].split())
    assert signature.startswith('LocalExecutor( workdir: StrPath = ".", *,'), signature
    assert "sandbox: Sandbox | None = None" in signature, signature
    assert squeezed(summary(executor.LocalExecutor) or "") in squeezed(entry["text"])
    png = browser.screenshot(tmp_path / "reference.png")
    assert png_size_and_colours(png)[2] > 16, "the screenshot is blank"


def test_the_diagrams_are_drawn(browser: Browser, served: str, tmp_path: Path) -> None:
    """Every ```mermaid block of a page is drawn by Mermaid in Chromium: none fails to parse."""
    pages = mermaid_pages()
    assert pages, "no page of the manual draws a diagram"
    browser.offline({"https://unpkg.com/mermaid@*": mermaid_library()})
    for address, count in pages.items():
        browser.open(served + address)
        # The theme swaps each <pre class="mermaid"> for the drawn diagram once
        # Mermaid has parsed and drawn it; one that does not parse stays a <pre>.
        drawn = f"""document.querySelectorAll("div.mermaid").length === {count}
            && !document.querySelector("pre.mermaid")"""
        try:
            browser.wait_for(drawn, seconds=30)
        except pytest.fail.Exception:
            left = browser.evaluate('document.querySelectorAll("pre.mermaid").length')
            pytest.fail(f"{address}: {left} of {count} diagrams were not drawn")
        heights = browser.evaluate(
            """[...document.querySelectorAll("div.mermaid")]
                .map(diagram => diagram.getBoundingClientRect().height)"""
        )
        assert all(height > 40 for height in heights), f"{address}: diagram heights {heights}"
        # The first diagram, just below the page's header bar.
        browser.evaluate(
            'scrollTo(0, document.querySelector("div.mermaid").getBoundingClientRect().top'
            " + scrollY - 80)"
        )
        name = address.strip("/").replace("/", "-") or "index"
        png = browser.screenshot(tmp_path / f"{name}-diagram.png")
        assert png_size_and_colours(png)[2] > 16, "the screenshot is blank"

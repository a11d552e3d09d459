"""The Python side of the code interpreter's stdio protocol: a REPL that runs cells.

This file is not imported: its text is sent to the interpreter where the
executor runs commands (`python3 -u -c <this file> <nonce>`), so it needs
nothing but the standard library and works from Python 3.8 on (annotations
are never evaluated: `from __future__ import annotations`).

Protocol. The host writes one JSON object a line to stdin: `{"code": "..."}`.
For each, the driver runs the cell in one namespace kept across cells and
writes, on stdout, frames `RS nonce ":" json LF` (RS is U+001E) between the
cell's own output, which passes through untouched:

- `{"t": "result", "plain": ..., "html": ...}`: the last expression's value
  (or a `display()` call's);
- `{"t": "image", "mime": "image/png", "data": base64}`: a matplotlib
  figure left open by the cell, or a value with `_repr_png_`;
- `{"t": "error", "ename": ..., "evalue": ..., "traceback": ...}`;
- `{"t": "done", "ok": bool}`, after which it writes `RS nonce ":end" LF` on
  stderr, so the host knows both streams are complete.

The first frame, `{"t": "ready"}`, says the driver is up. SIGINT interrupts
the running cell (a `KeyboardInterrupt` the cell may see) and is ignored
between cells. The cell's stdin is `/dev/null`: the protocol's own stdin is
kept on a private descriptor, out of reach of the cell's `input()` and of
the programs it starts.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import linecache
import os
import signal
import sys
import traceback
from typing import Any, cast

_NONCE = sys.argv[1].encode() if len(sys.argv) > 1 else b"0"
_FRAME = b"\x1e" + _NONCE + b":"
_running = False
_cells = 0
# Run with -c there is no __file__: the driver's frames are told by their code's file name.
_HERE = (lambda: None).__code__.co_filename


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _frame(message: dict[str, Any]) -> None:
    sys.stdout.flush()
    _write(1, _FRAME + json.dumps(message).encode() + b"\n")


def _on_sigint(signum: int, frame: Any) -> None:
    # Between cells a Ctrl-C has nothing to interrupt; it must not end the driver.
    if _running:
        raise KeyboardInterrupt


def _bundle(value: Any) -> None:
    """Send a value's forms: its text and html as a result, its PNG as an image."""
    html: str | None = None
    png: bytes | None = None
    for name in ("_repr_html_", "_repr_png_"):
        method = getattr(value, name, None)
        if method is None or isinstance(value, type):
            continue
        try:
            form = method()
        except Exception:
            continue
        if name == "_repr_html_" and isinstance(form, str):
            html = form
        elif name == "_repr_png_" and isinstance(form, bytes):
            png = form
    try:
        plain = repr(value)
    except Exception as error:
        plain = f"<repr failed: {type(error).__name__}: {error}>"
    _frame({"t": "result", "plain": plain, "html": html})
    if png is not None:
        _frame({"t": "image", "mime": "image/png", "data": base64.b64encode(png).decode()})


def display(*values: Any) -> None:
    """Show values as the last expression of a cell is shown (as Jupyter's `display`)."""
    for value in values:
        _bundle(value)


def _figures() -> None:
    """Send the matplotlib figures the cell left open, as PNG, and close them."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        numbers = list(pyplot.get_fignums())
    except Exception:
        return
    for number in numbers:
        figure = pyplot.figure(number)
        buffer = io.BytesIO()
        try:
            figure.savefig(buffer, format="png", bbox_inches="tight")
        except Exception as error:
            _frame(
                {
                    "t": "error",
                    "ename": type(error).__name__,
                    "evalue": str(error),
                    "traceback": "".join(traceback.format_exception_only(type(error), error)),
                }
            )
            continue
        _frame(
            {
                "t": "image",
                "mime": "image/png",
                "data": base64.b64encode(buffer.getvalue()).decode(),
            }
        )
    pyplot.close("all")


def _error(error: BaseException) -> None:
    # Drop the driver's own frames (its SIGINT handler's too): the traceback is the cell's.
    report = traceback.TracebackException(type(error), error, error.__traceback__)
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if frame.filename != _HERE]
    )
    lines = list(report.format())
    _frame(
        {
            "t": "error",
            "ename": type(error).__name__,
            "evalue": str(error),
            "traceback": "".join(lines),
        }
    )


def _run(code: str, namespace: dict[str, Any]) -> bool:
    global _running, _cells
    _cells += 1
    filename = f"<cell {_cells}>"
    # Tracebacks show the cell's lines, as they do for a file.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    ok = True
    try:
        _running = True
        try:
            tree = ast.parse(code, filename, "exec")
            last: ast.Expression | None = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(cast(ast.Expr, tree.body.pop()).value)
            exec(compile(tree, filename, "exec"), namespace)
            value = None
            if last is not None:
                value = eval(compile(last, filename, "eval"), namespace)
        finally:
            _running = False
        if value is not None:
            namespace["_"] = value
            _bundle(value)
    except BaseException as error:  # the cell's errors, KeyboardInterrupt and SystemExit too
        _running = False
        ok = False
        _error(error)
    _figures()
    return ok


def main() -> None:
    """Serve cells until stdin ends."""
    # Private copies of the protocol's descriptors; the cell gets /dev/null as stdin.
    requests = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the cell's stdin, for as long as the driver runs
    os.environ.setdefault("MPLBACKEND", "Agg")
    signal.signal(signal.SIGINT, _on_sigint)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "display": display,
    }
    sys.path.insert(0, os.getcwd())
    _frame({"t": "ready", "version": list(sys.version_info[:3])})
    for line in requests:
        try:
            request = json.loads(line)
            code = request["code"]
        except (ValueError, KeyError, TypeError):
            _frame(
                {
                    "t": "error",
                    "ename": "ProtocolError",
                    "evalue": "bad request",
                    "traceback": f"bad request: {line[:200]!r}",
                }
            )
            _frame({"t": "done", "ok": False})
            continue
        ok = False
        try:
            ok = _run(code, namespace)
        except KeyboardInterrupt:
            # A Ctrl-C that came as the cell ended: the cell is over all the same.
            pass
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            _frame({"t": "done", "ok": ok})
            _write(2, _FRAME + b"end\n")


if __name__ == "__main__":
    main()

# Headless Chromium for the manual's browser test: sourced by .ci/run.
#
# Installs Debian's chromium only: tests/test_docs_site.py builds the site,
# serves it on 127.0.0.1 itself and starts the browser headless, with a
# fresh profile, driving it over a pipe (no driver, no port); it closes it
# by pid. Exports EXECUTOR_REQUIRE_DOCS=1 so that the test fails instead of
# skipping when Chromium or mkdocs is missing.
# Idempotent: an installed Chromium is left as it is.

install_chromium() {
    if command -v chromium >/dev/null 2>&1; then
        return 0
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}

stop_chromium() {
    # The test closes the browser it started.
    :
}

install_chromium
export EXECUTOR_REQUIRE_DOCS=1
cleanups+=(stop_chromium)

# Headless Chromium for the manual's browser test: sourced by .ci/run.
#
# Installs Debian's chromium only: tests/test_docs_site.py builds the site,
# serves it on 127.0.0.1 itself and starts the browser headless, with a
# fresh profile, driving it over a pipe (no driver, no port); it closes it
# by pid. The theme draws the manual's diagrams with Mermaid, which it loads
# from a CDN; the test has no network, so Mermaid's dist file is fetched here
# from npm, at one pinned version, into a folder outside the repository, and
# the browser gets it from there (EXECUTOR_MERMAID_JS). Exports
# EXECUTOR_REQUIRE_DOCS=1 so that the test fails instead of skipping when
# Chromium, mkdocs or Mermaid is missing.
# Idempotent: an installed Chromium and a fetched Mermaid are used as they are.

mermaid_version=11.12.1
mermaid_dir=${EXECUTOR_MERMAID_HOME:-/tmp/executor-ci-mermaid-$mermaid_version}

install_chromium() {
    if ! command -v chromium >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
    if [ ! -f "$mermaid_dir/mermaid.min.js" ]; then
        if ! command -v npm >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
        fi
        mkdir -p "$mermaid_dir"
        local tarball
        tarball=$(cd "$mermaid_dir" && npm pack --silent "mermaid@$mermaid_version")
        tar -xzf "$mermaid_dir/$tarball" -C "$mermaid_dir" package/dist/mermaid.min.js
        mv "$mermaid_dir/package/dist/mermaid.min.js" "$mermaid_dir/mermaid.min.js"
        rm -rf "$mermaid_dir/package" "$mermaid_dir/$tarball"
    fi
}

stop_chromium() {
    # The test closes the browser it started.
    :
}

install_chromium
export EXECUTOR_MERMAID_JS=$mermaid_dir/mermaid.min.js
export EXECUTOR_REQUIRE_DOCS=1
cleanups+=(stop_chromium)

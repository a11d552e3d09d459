# Interpreters for the code interpreter's tests: sourced by .ci/run.
#
# Installs nodejs (JavaScript cells run on node) and exports
# EXECUTOR_REQUIRE_NODE=1 so the JavaScript tests fail instead of skipping.
# Python comes with the runner; bash is there already. R is optional and not
# installed (a large package): its tests skip, saying so. Nothing runs in the background, so the
# stop function has nothing to stop. Idempotent.

install_interpreters() {
    if ! command -v node >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
    fi
    node -e 'process.exit(0)'
}

stop_interpreters() {
    return 0
}

install_interpreters
export EXECUTOR_REQUIRE_NODE=1
cleanups+=(stop_interpreters)

# OS sandbox for LocalExecutor(sandbox=...): sourced by .ci/run.
#
# Installs bubblewrap (util-linux, already there, gives prlimit, setpriv and
# runuser), checks that a sandbox starts, and exports EXECUTOR_REQUIRE_SANDBOX=1
# so the sandbox tests fail instead of skipping. Nothing runs in the
# background, so the stop function has nothing to stop. Idempotent.

install_sandbox() {
    if ! command -v bwrap >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
    fi
    command -v prlimit >/dev/null || {
        echo "prlimit (util-linux) is missing" >&2
        return 1
    }
    bwrap --ro-bind / / --unshare-user --unshare-pid --unshare-net --die-with-parent -- true
}

stop_sandbox() {
    return 0
}

install_sandbox
export EXECUTOR_REQUIRE_SANDBOX=1
cleanups+=(stop_sandbox)

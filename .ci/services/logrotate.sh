# logrotate for the log tailer's rotation tests: sourced by .ci/run.
#
# Installs the logrotate package only (the tests run it themselves, with a
# configuration and state file of their own in a temporary folder; no cron
# job or timer is involved). Exports EXECUTOR_REQUIRE_LOGROTATE=1 so that
# tests/test_log_tailer.py fails instead of skipping when it is missing.
# Idempotent: an installed logrotate is left as it is.

install_logrotate() {
    if command -v logrotate >/dev/null 2>&1 || [ -x /usr/sbin/logrotate ]; then
        return 0
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq logrotate >/dev/null
}

stop_logrotate() {
    # Nothing runs in the background.
    :
}

install_logrotate
export EXECUTOR_REQUIRE_LOGROTATE=1
cleanups+=(stop_logrotate)

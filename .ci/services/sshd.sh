# OpenSSH server for the SshExecutor tests and benchmark: sourced by .ci/run.
#
# Installs openssh-server only: the tests and the benchmark start a private
# sshd of their own (tests/ssh_server.py: 127.0.0.1, a free port, its own
# config, keys and test user) and stop it by pid. The package's own sshd on
# port 22 is kept from starting, or stopped if it started anyway. Exports
# EXECUTOR_REQUIRE_SSH=1 so the SSH tests fail instead of skipping.
# Idempotent: an installed server is left as it is.

install_sshd() {
    if [ -x /usr/sbin/sshd ]; then
        return 0
    fi
    local policy=/usr/sbin/policy-rc.d placed=""
    if [ ! -e "$policy" ]; then
        # Tells the package scripts not to start services (exit code 101).
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        placed=yes
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
    if [ -n "$placed" ]; then
        rm -f "$policy"
    fi
    # Where an init system started it regardless: stop that one, by its pid.
    if [ -s /run/sshd.pid ]; then
        kill "$(cat /run/sshd.pid)" 2>/dev/null || true
    fi
}

stop_sshd() {
    # The private servers stop with the tests that started them.
    :
}

install_sshd
export EXECUTOR_REQUIRE_SSH=1
cleanups+=(stop_sshd)

# Cgroups for an unsandboxed LocalExecutor's commands: sourced by .ci/run.
#
# CI runs as root, so the executor can make a cgroup subtree of its own (in
# the cgroup v2 hierarchy, and in the v1 memory and pids hierarchies on a
# hybrid host). This checks that one can be made and removed here, and
# exports EXECUTOR_REQUIRE_CGROUPS=1 so that tests/test_cgroups.py fails
# instead of skipping. Nothing runs in the background. Idempotent.

check_cgroups() {
    if [ "$(id -u)" != 0 ]; then
        echo "cgroups: not root, the cgroup tests will skip" >&2
        return 0
    fi
    python -c '
from executor._local import cgroup
support = cgroup.probe()
config = cgroup.executor_cgroups(support)
cgroup.remove_cgroups(config)
assert config is not None and {"memory", "pids"} <= support.limits, support.describe()
print("cgroups:", support.describe())
' && export EXECUTOR_REQUIRE_CGROUPS=1
}

stop_cgroups() {
    return 0
}

check_cgroups
cleanups+=(stop_cgroups)

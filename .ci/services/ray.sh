# Ray for the RayExecutor tests and benchmark: sourced by .ci/run.
#
# Ray itself comes with the test extra (pip). The tests start their own
# cluster on 127.0.0.1 (tests/ray_cluster.py: a head node and a second node
# with a custom resource, as a process of its own that they stop by pid), so
# a node can be killed and another added mid-run. Exports
# EXECUTOR_REQUIRE_RAY=1 so those tests fail instead of skipping. Nothing
# runs in the background here. Idempotent.

check_ray() {
    python -c 'import ray' || {
        echo "ray is not installed: the test extra should bring it" >&2
        return 1
    }
}

stop_ray() {
    return 0
}

check_ray
export EXECUTOR_REQUIRE_RAY=1
cleanups+=(stop_ray)

"""A Ray cluster on 127.0.0.1 for the RayExecutor tests: a head node and a second node.

Run as a process of its own: `python tests/ray_cluster.py`. It starts the
head (one CPU) and a node with the custom resource `second`, both on the
loopback address only, prints one JSON line (the address, and each node's
id and raylet pid), then reads commands on stdin, one a line:

- `add NAME`: start one more node, with the custom resource NAME; prints its
  JSON line (`node_id`, `raylet_pid`).

At the end of stdin, or on SIGTERM, it shuts every node down (the processes
it started, by pid) and exits. `start()` runs it and returns a handle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

# Every address Ray picks is then 127.0.0.1: nothing listens on, or talks to,
# another interface. (Ray's name for the switch speaks of Windows and macOS.)
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _node_line(node: Any) -> dict[str, Any]:
    return {"node_id": node.node_id, "raylet_pid": node.all_processes["raylet"][0].process.pid}


def main() -> None:
    os.environ.update(LOOPBACK_ENV)
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
        shutdown_at_exit=False,
    )

    def stop(*_: object) -> None:
        cluster.shutdown()  # type: ignore[no-untyped-call]
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        second = cluster.add_node(num_cpus=1, resources={"second": 1})
        line = {
            "address": cluster.address,
            "head": _node_line(cluster.head_node),
            "second": _node_line(second),
        }
        print(json.dumps(line), flush=True)
        for command in sys.stdin:
            verb, _, name = command.strip().partition(" ")
            if verb == "add" and name:
                node = cluster.add_node(num_cpus=1, resources={name: 1})
                print(json.dumps(_node_line(node)), flush=True)
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


class RayCluster:
    """A running `ray_cluster.py` process and what it said."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **LOOPBACK_ENV},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(30)
            raise RuntimeError("the Ray cluster did not start")
        info = json.loads(line)
        self.address: str = info["address"]
        self.head: dict[str, Any] = info["head"]
        self.second: dict[str, Any] = info["second"]

    def add_node(self, resource: str) -> dict[str, Any]:
        """Start one more node with the custom resource `resource`; its id and raylet pid."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"add {resource}\n")
        self.process.stdin.flush()
        added: dict[str, Any] = json.loads(self.process.stdout.readline())
        return added

    def stop(self) -> None:
        """Shut the cluster down: end of stdin, then SIGTERM and SIGKILL by pid if it lingers."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    main()

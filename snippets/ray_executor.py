"""Run commands on a Ray cluster's nodes: `RayExecutor`, and `RayPool` to spread many.

Each executor is an actor on a node, chosen by a custom resource (or a node
id, or a placement group bundle), holding a `LocalExecutor` there; commands
see the node's id in `EXECUTOR_RAY_NODE_ID`. Output streams back as it is
produced; a timeout kills the tree on the node.

From the environment:

- `EXECUTOR_RAY_ADDRESS`: the cluster (default `auto`: the one this machine
  belongs to);
- `EXECUTOR_RAY_RESOURCE`: a custom resource one of its nodes has (default
  `second`).
"""

import os
import time

import anyio

from executor import Chunk, Command, RayExecutor, RayPool, TimedOut

ADDRESS = os.environ.get("EXECUTOR_RAY_ADDRESS", "auto")
RESOURCE = os.environ.get("EXECUTOR_RAY_RESOURCE", "second")


async def main() -> None:
    async with RayExecutor(ADDRESS, resources={RESOURCE: 0.01}) as ex:
        info = await ex.node()
        out = await ex.exec_cmd(Command.shell('echo "$EXECUTOR_RAY_NODE_ID"'))
        print(f"placed where asked: {out.text().strip() == info.node_id}")

        started = time.monotonic()
        arrivals: list[float] = []

        def sink(chunk: Chunk) -> None:
            arrivals.append(time.monotonic() - started)

        await ex.exec_cmd_streaming(Command.shell("echo one; sleep 1; echo two"), sink)
        print(f"first chunk before the end: {arrivals[0] < arrivals[-1] - 0.5}")

        await ex.exec_cmd(Command.write_file("notes.txt", "on the node\n"))
        read = await ex.exec_cmd(Command.read_file("notes.txt"))
        print(f"read back: {read.text().strip()}")

        try:
            await ex.exec_cmd(Command.shell("sleep 30").with_timeout(0.5))
        except TimedOut as error:
            print(f"TimedOut: {error.message}")

    async with RayPool(2) as pool:
        executors = [pool.executor(index) for index in range(2)]
        for executor in executors:
            await executor.exec_cmd(Command.shell("true"))
        nodes = {info.node_id for info in await pool.placements()}
        print(f"pool of 2 spread over {len(nodes)} nodes")


if __name__ == "__main__":
    anyio.run(main)

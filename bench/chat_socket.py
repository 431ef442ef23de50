"""Chat socket cost: command round trips, a streamed turn's deltas, broadcast fan-out.

    .venv/bin/python -m bench.chat_socket --round-trips 2000 --deltas 5000 --clients 50

A real `ChatServer` on a Unix socket in a temp directory with the scripted handler, real
clients (`ChatClient`). Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import anyio
import anyio.lowlevel

from daemon.chat import protocol
from daemon.chat.client import ChatClient
from daemon.chat.server import ChatServer
from daemon.chat.testing import ScriptedChatHandler, ScriptedTurn
from daemon.log import configure


async def bench(round_trips: int, deltas: int, clients: int) -> None:
    path = Path(tempfile.mkdtemp(prefix="reverie-bench-")) / "r.sock"
    turn = ScriptedTurn(chunks=tuple(f"token{i} " for i in range(deltas)))
    async with ScriptedChatHandler(turn=turn, commands={"ping": lambda a: 1}) as handler:
        async with anyio.create_task_group() as tg:
            server = ChatServer(
                path, handler, max_frame_bytes=1 << 20, queue_frames=deltas + 64, allow_uids=()
            )
            await tg.start(server.serve)

            async with ChatClient.connect(path) as client:
                samples = []
                for i in range(round_trips):
                    start = time.perf_counter()
                    await client.send({"type": "command", "name": "ping", "id": str(i)})
                    await client.receive(timeout=5)
                    samples.append(time.perf_counter() - start)
                samples.sort()
                print(
                    f"command round trip: n={round_trips} median={statistics.median(samples) * 1e6:.0f}µs "
                    f"p99={samples[int(len(samples) * 0.99)] * 1e6:.0f}µs"
                )

                start = time.perf_counter()
                done = await client.run_turn("go", lambda f: None, timeout=60)
                elapsed = time.perf_counter() - start
                assert done["type"] == "done"
                print(
                    f"streamed turn: {deltas} deltas in {elapsed * 1e3:.1f}ms ({deltas / elapsed:,.0f} frames/s)"
                )

            async with anyio.create_task_group() as readers:
                received = [0]
                ready = anyio.Event()
                connected = [0]

                async def reader() -> None:
                    async with ChatClient.connect(path) as c:
                        connected[0] += 1
                        if connected[0] == clients:
                            ready.set()
                        while received[0] < clients * 100:
                            frame = await c.receive(timeout=10)
                            if frame["type"] == "state":
                                received[0] += 1
                                if received[0] == clients * 100:
                                    return
                            if frame.get("detail") == "99":
                                return

                for _ in range(clients):
                    readers.start_soon(reader)
                await ready.wait()
                start = time.perf_counter()
                for i in range(100):
                    server.broadcast(protocol.state("awake", detail=str(i)))
                    await anyio.lowlevel.checkpoint()
            elapsed = time.perf_counter() - start
            print(f"broadcast: 100 frames to {clients} clients delivered in {elapsed * 1e3:.1f}ms")
            tg.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--deltas", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    configure("warning")
    anyio.run(bench, args.round_trips, args.deltas, args.clients)


if __name__ == "__main__":
    main()

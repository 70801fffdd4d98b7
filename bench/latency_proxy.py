"""A TCP proxy that delays every byte by a fixed one-way latency, both ways:
a network round trip of 2 x delay between a client and an RPC worker on loopback.

`tc qdisc ... netem delay` in a network namespace is the usual tool; this
kernel has no netem module, so the bench puts this proxy in front of each worker
instead. Data keeps its order; each chunk leaves `delay` after it arrived. It
runs in a process of its own: a client in the bench's process may block in a
native call that holds the GIL while it waits for the answer the proxy carries.

    with LatencyProxy(worker_port, delay_s=0.0025) as proxy:
        ...  # connect to proxy.endpoint
    python -m bench.latency_proxy UPSTREAM_PORT DELAY_S   # prints its port, serves until killed
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time


class LatencyProxy:
    def __init__(self, upstream_port: int, delay_s: float):
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.port = 0
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> LatencyProxy:
        self._proc = subprocess.Popen([sys.executable, "-m", "bench.latency_proxy", str(self.upstream_port),
                                       repr(self.delay_s)], stdout=subprocess.PIPE, text=True)
        line = self._proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the latency proxy did not start: {line!r}")
        self.port = int(line)
        return self

    def __exit__(self, *exc) -> None:
        self._proc.terminate()
        self._proc.wait(10)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while (item := await queue.get()) is not None:
            due, data = item
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while data := await reader.read(1 << 20):
            queue.put_nowait((time.monotonic() + delay_s, data))
    finally:
        queue.put_nowait(None)
        await sender


async def _serve(upstream_port: int, delay_s: float) -> None:
    async def connection(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        for w in (client_w, up_w):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pump(client_r, up_w, delay_s), _pump(up_r, client_w, delay_s),
                             return_exceptions=True)

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), float(sys.argv[2])))

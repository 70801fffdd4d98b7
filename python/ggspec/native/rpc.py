"""ggml's RPC backend from Python: a worker that serves this host's CPU
(`ggspec rpc-server`), and what this process has sent to workers so far.

A client splits a target over workers with `load(..., rpc=...)`. The protocol
has no authentication: anyone who reaches a worker's port can run graphs and
read and write its memory, so a worker binds to 127.0.0.1 unless told otherwise
and belongs on a trusted network only."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass

import ggspec._core as _core

available: bool = _core.rpc_available


@dataclass(frozen=True)
class WireCounters:
    """What this process's RPC connections have carried so far."""
    round_trips: int     # answers waited for: a receive after a send on a connection
    bytes_sent: int
    bytes_received: int

    def __sub__(self, other: WireCounters) -> WireCounters:
        return WireCounters(self.round_trips - other.round_trips, self.bytes_sent - other.bytes_sent,
                            self.bytes_received - other.bytes_received)


def wire_counters() -> WireCounters:
    if not available:
        return WireCounters(0, 0, 0)
    return WireCounters(*_core.rpc_wire_counters())


def _check_port(host: str, port: int) -> None:
    """ggml's server prints its own failure to listen and returns; say it as an exception first."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve --host {host!r}: {e}") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"cannot listen at {host}:{port}: {e.strerror}") from None


def serve(host: str = "127.0.0.1", port: int = 50052, n_threads: int = 1, cache_dir: str | None = None,
          kernels: bool = True) -> None:
    """Serves this host's CPU to RPC clients until SIGTERM or SIGINT, which end the
    process at once (ggml's server loop cannot be interrupted, so it runs in a thread
    this one does not wait for). cache_dir keeps tensors clients send by their hash,
    so a restarted client sends each large one once. kernels: a ggspec client's weight
    products run on ggspec's kernels here, as on its own host (else on ggml's ops, as
    on any ggml worker; the bits are the same)."""
    if not available:
        raise ValueError("this ggspec was built without ggml's RPC backend (GGML_RPC=off)")
    if not 0 < port <= 65535:
        raise ValueError(f"--port must be in 1..65535, got {port}")
    if n_threads < 1:
        raise ValueError(f"threads must be at least 1, got {n_threads}")
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    _check_port(host, port)
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _core.rpc_serve(endpoint, cache_dir or "", n_threads, kernels)
        except BaseException as e:  # reported by the waiting thread
            failure.append(e)

    def stop(signum, _frame) -> None:
        print(f"ggspec rpc-server: {signal.Signals(signum).name}, stopping", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = threading.Thread(target=run, name="ggml-rpc-server", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)  # wakes often enough for a signal handler to run
    if failure:
        raise ValueError(str(failure[0]))


__all__ = ["WireCounters", "available", "serve", "wire_counters"]

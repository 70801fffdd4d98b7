"""ggml RPC workers (`ggspec rpc-server`, or llama.cpp's `ggml-rpc-server` for the
peer) for a test or a benchmark: on 127.0.0.1, each on a free port, started and
stopped by the caller, every wait bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO


# Runs the worker with PR_SET_PDEATHSIG (kept across exec): a client that loses a
# worker ends its process (exit 1), test runner and all, with no teardown left to
# stop the other workers. Not a preexec_fn, which may deadlock where the parent
# runs threads.
_END_WITH_PARENT = ("import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
                    "os.execvp(sys.argv[1], sys.argv[1:])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RpcWorker:
    """program: the server's command before its options (default `ggspec rpc-server`); both
    servers take -H HOST -p PORT -t THREADS. extra: more options (ggspec's --cache DIR)."""

    def __init__(self, log: Path, threads: int = 1, extra: tuple[str, ...] = (), program: list[str] | None = None,
                 start_timeout: float = 60):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = log
        self._log_file = open(log, "w")
        program = program or [sys.executable, "-m", "ggspec", "rpc-server"]
        command = [*program, "-H", "127.0.0.1", "-p", str(self.port), "-t", str(threads), *extra]
        if sys.platform == "linux":
            command = [sys.executable, "-c", _END_WITH_PARENT, *command]
        self.proc = subprocess.Popen(command, stdout=self._log_file, stderr=subprocess.STDOUT, cwd=str(REPO),
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        deadline = time.monotonic() + start_timeout
        while not self._listening():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{program[-1]} exited with {self.proc.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)  # none outlives a failed start
                raise TimeoutError(f"{program[-1]} did not listen in {start_timeout} s:\n{log.read_text()}")
            time.sleep(0.05)

    def _listening(self) -> bool:
        """A bare connection, closed at once: the worker drops it and waits for the next."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> float:
        """Signals the worker and returns how long it took to exit."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._log_file.close()
        return time.monotonic() - start

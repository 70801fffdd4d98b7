"""A `ggspec serve` process for a test or a benchmark (bench.serve): on 127.0.0.1,
on a free port, started and stopped by its caller, every wait bounded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import REPO


class ServerProcess:
    def __init__(self, args: list[str], log: Path, api_key: str | None = None, start_timeout: float = 120):
        self.api_key = api_key
        self.log = log
        key = ["--api-key", api_key] if api_key else []
        self._log_file = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "ggspec", "serve", "--host", "127.0.0.1", "--port", "0",
                                      *key, *args], stdout=self._log_file, stderr=subprocess.STDOUT,
                                     cwd=str(REPO), env=dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            self.url = self._wait_for_port(start_timeout)
            self.wait_healthy(start_timeout)
        except BaseException:  # no server outlives a failed start, loading its model for the later tests
            self.proc.kill()
            self.proc.wait(10)
            self._log_file.close()
            raise

    def _wait_for_port(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.log.read_text())
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"ggspec serve exited with {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise TimeoutError(f"ggspec serve did not bind in {timeout} s:\n{self.log.read_text()}")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get("/health")[0] == 200:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"ggspec serve exited with {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.1)
        raise TimeoutError(f"ggspec serve was not healthy in {timeout} s:\n{self.log.read_text()}")

    def get(self, path: str, key: str | None = "default") -> tuple[int, bytes]:
        """GET path with the server's key (key=None: without one)."""
        key = self.api_key if key == "default" else key
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {key}"} if key else {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (ConnectionError, urllib.error.URLError):
            return 0, b""

    def stop(self, timeout: float = 30) -> int:
        """SIGINT (a graceful shutdown), then SIGKILL if it hangs; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        self._log_file.close()
        return self.proc.returncode

"""`ggspec serve`: binds the socket, then serves while the model loads in the background."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading

import uvicorn

from ggspec.server.app import create_app
from ggspec.server.service import ServerConfig, Service


def serve(config: ServerConfig, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serves until interrupted; raises the model's load error, if loading fails."""
    if config.model_path is not None and not os.path.isfile(config.model_path):
        raise FileNotFoundError(f"model file not found: {config.model_path}")  # before listening
    logging.basicConfig(level=logging.INFO, format="ggspec: %(message)s")
    service = Service(config)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", timeout_graceful_shutdown=5))

    def stop_on_load_error() -> None:
        service.ready.wait()
        if service.error is not None:
            server.should_exit = True

    threading.Thread(target=stop_on_load_error, daemon=True).start()
    print(f"ggspec: listening on http://{host}:{bound} (model loading; /health answers 503 until it is ready)",
          file=sys.stderr, flush=True)
    # uvicorn shuts down gracefully on either signal, then raises it again: SIGTERM, like
    # SIGINT, then ends the command normally
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.run(sockets=[sock])  # on SIGINT or SIGTERM: in-flight requests get 5 s, then are cancelled
    except KeyboardInterrupt:  # uvicorn raises the signal again once it has shut down
        pass
    print("ggspec: server stopped", file=sys.stderr, flush=True)
    if service.error is not None:
        raise service.error


__all__ = ["serve"]

"""Test HTTP servers run in threads of the test process."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import HTTPServer
from typing import Callable, Iterator, TypeVar

S = TypeVar("S", bound=HTTPServer)


@contextmanager
def serving() -> Iterator[Callable[[S], S]]:
    """Yield `start(server)`, which serves it in a daemon thread; every started server is shut down on the way out."""
    servers: list[HTTPServer] = []

    def start(server: S) -> S:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()

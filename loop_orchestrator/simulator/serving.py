"""How a scripted endpoint answers over HTTP, whatever the API: a stream of server-sent
events, or a fault that is no answer (a dropped connection, a hung request).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from loop_orchestrator.simulator.replies import Fault

#: the longest a ``hang`` holds a request (the endpoint's close releases it sooner)
HANG_SECONDS = 600.0


class Closable(Protocol):
    """An endpoint as a hung request sees it: set when the endpoint closes."""

    @property
    def closing(self) -> threading.Event: ...


def send_events(
    handler: http.server.BaseHTTPRequestHandler,
    events: Sequence[tuple[str | None, Any]],
    *,
    end: str = "\n\n",
    headers: Mapping[str, str] | None = None,
    done: str | None = None,
) -> None:
    """Answer 200 with a stream of server-sent events and close the connection: each event
    an ``event: NAME`` line (none for a None name), a ``data:`` line of JSON, then ``end``;
    ``done``: a last ``data:`` line of that raw text (OpenAI's ``[DONE]``); ``headers``:
    more response headers. A client that hung up is no error (the endpoint logs what it
    answered)."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("connection", "close")
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.close_connection = True
    with contextlib.suppress(OSError):
        for name, data in events:
            head = f"event: {name}\n" if name is not None else ""
            handler.wfile.write(f"{head}data: {json.dumps(data)}{end}".encode())
        if done is not None:
            handler.wfile.write(f"data: {done}{end}".encode())
        handler.wfile.flush()


def drop_or_hang(
    handler: http.server.BaseHTTPRequestHandler, fault: Fault, endpoint: Closable
) -> None:
    """Serve a fault that is not an answer: ``drop`` cuts the connection, ``hang`` holds
    the request until the endpoint closes (``HANG_SECONDS`` at most)."""
    handler.close_connection = True
    if fault.kind == "drop":
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)
    else:
        endpoint.closing.wait(HANG_SECONDS)

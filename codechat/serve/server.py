"""Run the app of serve/app.py on uvicorn: bind, print the address, drain on SIGTERM/SIGINT, exit 0.

The connection layer is uvicorn's, with its own limits set: `limit_concurrency` (--max-connections: beyond it a
request is answered 503), keep-alive, the largest head; and one it lacks, a header timeout (`_GuardedH11`).
"""
from __future__ import annotations

import contextlib
import signal
import socket
import sys

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from codechat import CodechatError
from codechat.serve.app import build_app
from codechat.serve.config import ServeConfig

KEEP_ALIVE_S = 75
MAX_HEAD_BYTES = 16 << 10
"""Largest request line + headers (h11's default, stated): a larger head is answered 400 and closed."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        # uvicorn re-raises SIGTERM/SIGINT once it has drained; a completed graceful stop is a clean exit (0)
        old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a header timeout, which uvicorn lacks: a connection that has not completed a
    request's headers `header_timeout_s` after it opened (or after the first bytes of its next request) is
    closed, so half-open and trickling connections cannot hold the connection cap. Idle kept-alive
    connections are uvicorn's (`timeout_keep_alive`)."""

    header_timeout_s = 10.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def data_received(self, data: bytes) -> None:
        between = self.cycle is None or self.cycle.response_complete
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            if self._head_timer is not None:  # the head is complete: the app (body timeout) takes over
                self._head_timer.cancel()
                self._head_timer = None
        elif between and self._head_timer is None:  # the first bytes of a next request, its head incomplete
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def connection_lost(self, exc) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        raise CodechatError(f"cannot listen on {host}:{port}: {e}") from None
    return sock


def serve(cfg: ServeConfig) -> int:
    """Bind, print the address, serve until SIGTERM/SIGINT has drained the in-flight requests; returns 0."""
    sock = _bind(cfg.host, cfg.port)
    holder: list[uvicorn.Server] = []
    app = build_app(cfg, closing=lambda: bool(holder) and holder[0].should_exit)
    # keep-alive 75 s (nginx's default), not uvicorn's 5: a trainer's client idles between steps and after a
    # Retry-After, and a server closing the connection as the client reuses it loses that request (ReadError)
    protocol = type("GuardedH11", (_GuardedH11,), {"header_timeout_s": cfg.header_timeout_s})
    server = _Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=cfg.grace_s,
                                    lifespan="on", access_log=False, timeout_keep_alive=KEEP_ALIVE_S,
                                    http=protocol, limit_concurrency=cfg.max_connections,
                                    h11_max_incomplete_event_size=MAX_HEAD_BYTES))
    holder.append(server)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"codechat serve: listening on http://{shown}:{port}", flush=True)
    server.run(sockets=[sock])
    print("codechat serve: stopped", file=sys.stderr, flush=True)
    return 0

"""Run the app of serve/app.py on uvicorn: bind, print the address, drain on SIGTERM/SIGINT, exit 0."""
from __future__ import annotations

import contextlib
import signal
import socket
import sys

import uvicorn

from codechat import CodechatError
from codechat.serve.app import build_app
from codechat.serve.config import ServeConfig

KEEP_ALIVE_S = 75


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
    server = _Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=cfg.grace_s,
                                    lifespan="on", access_log=False, timeout_keep_alive=KEEP_ALIVE_S))
    holder.append(server)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"codechat serve: listening on http://{shown}:{port}", flush=True)
    server.run(sockets=[sock])
    print("codechat serve: stopped", file=sys.stderr, flush=True)
    return 0

"""`codechat serve`: the sandbox verifier as an HTTP server (SandboxFusion `/run_code`, batch `/verify`).

    codechat serve [--host H] [--port P] [--token T] [--workers N] [--tasks FILE] [--max-pending N] ...

Prints `codechat serve: listening on http://HOST:PORT` once bound (with --port 0, the port chosen), then serves
until SIGTERM/SIGINT, which finishes in-flight requests (up to --grace seconds) and exits 0. The token may also
come from CODECHAT_SERVE_TOKEN. Needs the `serve` extra (`pip install codechat[serve]`).
"""
from __future__ import annotations

import argparse
import math
import os

from codechat import CodechatError
from codechat.serve.config import LOCAL_HOSTS, ServeConfig

TOKEN_ENV = "CODECHAT_SERVE_TOKEN"


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = ServeConfig()
    p.add_argument("--host", default=d.host, help=f"address to listen on (default {d.host})")
    p.add_argument("--port", type=int, default=d.port, help=f"TCP port, 0 = any free one (default {d.port})")
    p.add_argument("--token", default=None, help=f"bearer token required on every route but /health "
                                                 f"(default: ${TOKEN_ENV}); required beyond localhost")
    p.add_argument("--no-token", action="store_true", help="listen beyond localhost without a token")
    p.add_argument("--no-plus", action="store_true", help="judge MBPP+/HumanEval+ tasks by their shown asserts "
                   "only (default: also on evalplus's plus inputs, as the training reward)")
    p.add_argument("--workers", type=int, default=None, help="sandbox workers (default: one per CPU core)")
    p.add_argument("--tasks", default="", help="task set loaded at start: /verify may name its tasks by id")
    p.add_argument("--timeout", type=float, default=None, help="/verify: wall-clock seconds per program (default 5)")
    p.add_argument("--memory-mb", type=int, default=None, help="/verify: address-space limit per program")
    p.add_argument("--max-pending", type=int, default=d.max_pending,
                   help=f"requests admitted at once; more get 429 + Retry-After (default {d.max_pending})")
    p.add_argument("--max-body-mb", type=float, default=d.max_body_mb,
                   help=f"largest request body; more gets 413 (default {d.max_body_mb:g})")
    p.add_argument("--max-batch", type=int, default=d.max_batch,
                   help=f"/verify: most completions per request; more gets 413 (default {d.max_batch})")
    p.add_argument("--max-run-timeout", type=float, default=d.max_run_timeout_s,
                   help=f"/run_code: largest run_timeout accepted (default {d.max_run_timeout_s:g})")
    p.add_argument("--max-task-timeout", type=float, default=d.max_task_timeout_s,
                   help=f"/verify: largest timeout_s a request's task records get (default {d.max_task_timeout_s:g})")
    p.add_argument("--max-connections", type=int, default=d.max_connections,
                   help=f"open connections at once; a request beyond them gets 503 (default {d.max_connections})")
    p.add_argument("--header-timeout", type=float, default=d.header_timeout_s,
                   help=f"seconds a connection has to complete a request's headers (default {d.header_timeout_s:g})")
    p.add_argument("--body-timeout", type=float, default=d.body_timeout_s,
                   help=f"seconds an admitted request has to send its body; else 408 (default {d.body_timeout_s:g})")
    p.add_argument("--queue-timeout", type=float, default=d.queue_timeout_s,
                   help=f"seconds a request may wait for a sandbox worker; else 503 (default {d.queue_timeout_s:g})")
    p.add_argument("--cache-size", type=int, default=d.cache_size,
                   help="/verify: distinct verdicts kept across requests (default 0: dedup within a request)")
    p.add_argument("--grace", type=float, default=d.grace_s,
                   help=f"seconds to finish in-flight requests on shutdown (default {d.grace_s:g})")


def config_from_args(args) -> ServeConfig:
    cfg = ServeConfig(host=args.host, port=args.port, token=args.token or os.environ.get(TOKEN_ENV, ""),
                      allow_no_token=args.no_token, tasks=args.tasks, max_pending=args.max_pending,
                      max_body_mb=args.max_body_mb, max_batch=args.max_batch, max_run_timeout_s=args.max_run_timeout,
                      cache_size=args.cache_size, grace_s=args.grace, max_task_timeout_s=args.max_task_timeout,
                      max_connections=args.max_connections, header_timeout_s=args.header_timeout,
                      body_timeout_s=args.body_timeout, queue_timeout_s=args.queue_timeout)
    if not 0 <= cfg.port < 65536:
        raise CodechatError(f"--port must be in 0..65535, got {cfg.port}")
    if cfg.host not in LOCAL_HOSTS and not cfg.token and not cfg.allow_no_token:
        raise CodechatError(f"--host {cfg.host} listens beyond localhost: set --token (or ${TOKEN_ENV}), "
                            f"or pass --no-token for a network you trust")
    for name, v in (("--max-pending", cfg.max_pending), ("--max-body-mb", cfg.max_body_mb),
                    ("--max-batch", cfg.max_batch),
                    ("--max-run-timeout", cfg.max_run_timeout_s), ("--grace", cfg.grace_s),
                    ("--max-task-timeout", cfg.max_task_timeout_s), ("--max-connections", cfg.max_connections),
                    ("--header-timeout", cfg.header_timeout_s), ("--body-timeout", cfg.body_timeout_s),
                    ("--queue-timeout", cfg.queue_timeout_s)):
        if not (v > 0 and math.isfinite(v)):
            raise CodechatError(f"{name} must be positive, got {v}")
    if cfg.cache_size < 0:
        raise CodechatError(f"--cache-size must be >= 0, got {cfg.cache_size}")
    v = cfg.verifier
    v.plus_inputs = not args.no_plus
    if args.workers is not None:
        if args.workers < 0:
            raise CodechatError(f"--workers must be >= 0 (0 = one per CPU core), got {args.workers}")
        v.workers = args.workers
    if args.timeout is not None:
        if not args.timeout > 0:
            raise CodechatError(f"--timeout must be positive, got {args.timeout}")
        v.timeout_s = args.timeout
    if args.memory_mb is not None:
        if args.memory_mb < 64:
            raise CodechatError(f"--memory-mb must be at least 64, got {args.memory_mb}")
        v.memory_mb = cfg.memory_mb = args.memory_mb
    if cfg.tasks and not cfg.tasks.startswith("builtin"):
        v.hide_paths = [os.path.dirname(os.path.abspath(cfg.tasks.split(":")[0]))]
    return cfg


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    try:
        from codechat.serve import server  # optional dependencies (starlette, uvicorn): the `serve` extra
    except ImportError as e:
        raise CodechatError(f"codechat serve needs the serve extra: pip install 'codechat[serve]' ({e})") from None
    return server.serve(cfg)

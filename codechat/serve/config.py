"""`ServeConfig`: how `codechat serve` listens, admits and limits requests (codechat/serve/app.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from codechat.config import VerifierConfig

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    """Address to listen on; anything beyond localhost requires a token (or `allow_no_token`)."""
    port: int = 8080
    """TCP port (0 = any free port, printed at start)."""
    token: str = ""
    """Bearer token every request except GET /health must carry (`Authorization: Bearer TOKEN`); empty = none."""
    allow_no_token: bool = False
    """Listen beyond localhost without a token (for a private network you trust)."""
    max_body_mb: float = 16.0
    """Largest request body; more is answered 413."""
    max_pending: int = 256
    """Requests admitted at once (running or waiting for a sandbox worker); more are answered 429 + Retry-After."""
    max_batch: int = 8192
    """Most completions in one POST /verify (more: 413)."""
    run_timeout_s: float = 10.0
    """/run_code: `run_timeout` when the request sets none (SandboxFusion's default)."""
    max_run_timeout_s: float = 60.0
    """/run_code: the operator's cap on `run_timeout` (a larger one runs with this one)."""
    memory_mb: int = 1024
    """/run_code: the operator's memory cap: `memory_limit_MB` above it (or -1, "no limit") runs with it."""
    max_task_timeout_s: float = 60.0
    """/verify: largest `timeout_s` a request's task records get (a larger one runs with this one)."""
    max_connections: int = 1024
    """Open connections (and requests in progress) at once; a request beyond them is answered 503 (uvicorn's
    `limit_concurrency`)."""
    header_timeout_s: float = 10.0
    """A connection must complete a request's headers this many seconds after it opens or starts the request."""
    body_timeout_s: float = 30.0
    """An admitted request must deliver its whole body within this many seconds (else 408)."""
    queue_timeout_s: float = 60.0
    """A request not started on a sandbox worker this many seconds after it arrived is answered 503 +
    Retry-After, and never runs."""
    max_stdout_mb: float = 4.0
    """/run_code: stdout kept per program; more ends the run with status Error."""
    tasks: str = ""
    """A task set loaded at start (any `load_tasks` spec): POST /verify may then name tasks by id."""
    grace_s: float = 30.0
    """On SIGTERM/SIGINT: stop accepting, finish in-flight requests for up to this many seconds, then exit."""
    cache_size: int = 0
    """/verify: keep up to this many distinct verdicts across requests (LRU); 0 = dedup within a request only."""
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    """Sandbox workers, limits and judging of /verify (the same settings as `codechat verify`)."""

"""The HTTP app of `codechat serve` (Starlette on uvicorn): one sandbox pool, started once, behind five routes.

    POST /run_code   SandboxFusion's contract, one program on one stdin (serve/runcode.py)
    POST /verify     a batch of completions against tasks -> codechat verdicts (serve/batch.py)
    GET  /health     {"status": "ok", workers, protections}  (no token needed)
    GET  /metrics    requests, programs/s, queue depth, statuses, p50/p99 latency (serve/metrics.py)

Operations: a bearer token checked on every route but /health; bodies over `max_body_mb` get 413; more than
`max_pending` requests admitted at once get 429 with Retry-After (never a hung connection); during shutdown
new requests get 503 with Retry-After while in-flight ones finish. Single runs go through a thread pool of one
thread per sandbox worker, each borrowing one worker, so a burst of single runs never starves a batch of all
of them; batches run one at a time, each on every worker it can borrow. A worker that dies mid-request gives
that program `infra_error` (SandboxError on /run_code), is replaced, and the server keeps serving.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from codechat.sandbox.capture import captured
from codechat.serve import batch, runcode
from codechat.serve.config import ServeConfig
from codechat.serve.metrics import Metrics
from codechat.tasks import load_tasks
from codechat.verifier.dedup import DedupVerifier
from codechat.verifier.plus import PlusVerifier
from codechat.verifier.verify import Verifier

RETRY_FULL_S, RETRY_CLOSING_S = 1, 5


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


class Service:
    """The state behind the routes: verifier, executors, admission count, metrics."""

    def __init__(self, cfg: ServeConfig, closing: Callable[[], bool] = lambda: False):
        self.cfg, self.closing = cfg, closing
        self.verifier = Verifier(cfg.verifier)
        self.loaded = {t.task_id: t for t in load_tasks(cfg.tasks)} if cfg.tasks else {}
        # MBPP+ plus inputs for the tasks the server loaded; a request's own records run no reference
        judge = PlusVerifier(self.verifier, trusted=lambda t: self.loaded.get(t.task_id) is t) \
            if cfg.verifier.plus_inputs else self.verifier
        self.dedup = DedupVerifier(judge, cache_size=cfg.cache_size, dedup=cfg.verifier.dedup)
        self.single = ThreadPoolExecutor(self.verifier.workers, thread_name_prefix="run_code")
        self.batch = ThreadPoolExecutor(1, thread_name_prefix="verify")  # one batch at a time: each takes all
        self.metrics = Metrics()
        self.pending = 0  # admitted requests not yet answered (touched only on the event loop)
        self.running = 0

    def start(self) -> None:
        self.verifier.pool  # start the zygotes now: the first request finds them warm

    def close(self) -> None:
        self.single.shutdown(wait=True)
        self.batch.shutdown(wait=True)
        self.dedup.close()

    # --- request plumbing ----------------------------------------------------------------------------------
    def check_auth(self, request: Request) -> None:
        if not self.cfg.token:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {self.cfg.token}".encode()):
            raise _Refused(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                           {"WWW-Authenticate": "Bearer"})

    async def body(self, request: Request):
        limit = int(self.cfg.max_body_mb * (1 << 20))
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _Refused(413, f"request body of {int(declared)} bytes is over the {limit}-byte limit")
        buf = bytearray()
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > limit:
                raise _Refused(413, f"request body is over the {limit}-byte limit")
        try:
            return json.loads(buf)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _Refused(400, f"the request body is not JSON: {e}") from None

    @contextlib.contextmanager
    def admitted(self):
        if self.closing():
            raise _Refused(503, "the server is shutting down", {"Retry-After": str(RETRY_CLOSING_S)})
        if self.pending >= self.cfg.max_pending:
            raise _Refused(429, f"{self.pending} requests in progress (limit {self.cfg.max_pending})",
                           {"Retry-After": str(RETRY_FULL_S)})
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1

    async def in_thread(self, executor: ThreadPoolExecutor, fn, *args):
        loop = asyncio.get_running_loop()
        self.running += 1
        try:
            return await loop.run_in_executor(executor, fn, *args)
        finally:
            self.running -= 1

    # --- work ----------------------------------------------------------------------------------------------
    def run_one(self, job) -> dict:
        try:
            return runcode.response(captured(self.verifier.pool.run(job)))
        except RuntimeError as e:  # the pool closed under us (shutdown past the grace period)
            return runcode.sandbox_error(f"the sandbox failed: {e}")

    def verify_batch(self, pairs) -> tuple[list, dict]:
        verdicts = self.dedup.verify_many(pairs)
        return verdicts, self.dedup.last.metrics()


def _refusal(svc: Service, endpoint: str, e: _Refused) -> JSONResponse:
    svc.metrics.request(endpoint, e.status)
    return JSONResponse({"error": str(e)}, status_code=e.status, headers=e.headers)


def build_app(cfg: ServeConfig, closing: Callable[[], bool] = lambda: False) -> Starlette:
    svc = Service(cfg, closing)

    async def run_code(request: Request):
        t0 = time.monotonic()
        try:
            svc.check_auth(request)
            req = await svc.body(request)
            with svc.admitted():
                try:
                    job = runcode.parse(req, cfg)
                except runcode.BadRunRequest as e:
                    resp = runcode.sandbox_error(str(e))
                else:
                    resp = await svc.in_thread(svc.single, svc.run_one, job)
        except _Refused as e:
            return _refusal(svc, "/run_code", e)
        svc.metrics.request("/run_code", 200)
        svc.metrics.done("/run_code", time.monotonic() - t0, [runcode.run_status_key(resp)])
        return JSONResponse(resp)

    async def verify(request: Request):
        t0 = time.monotonic()
        try:
            svc.check_auth(request)
            req = await svc.body(request)
            with svc.admitted():
                try:  # loading task records is CPU work: off the event loop, beside (not behind) batches
                    pairs, ids = await asyncio.get_running_loop().run_in_executor(
                        None, batch.parse, req, svc.loaded, cfg.max_batch)
                except batch.BadVerifyRequest as e:
                    raise _Refused(413 if "over the limit" in str(e) else 400, str(e)) from None
                verdicts, stats = await svc.in_thread(svc.batch, svc.verify_batch, pairs)
        except _Refused as e:
            return _refusal(svc, "/verify", e)
        svc.metrics.request("/verify", 200)
        svc.metrics.done("/verify", time.monotonic() - t0, [v.status for v in verdicts])
        return JSONResponse({"verdicts": [{**i, **v.to_dict()} for i, v in zip(ids, verdicts)], "stats": stats})

    async def health(request: Request):
        pool = svc.verifier.pool
        return JSONResponse({"status": "closing" if closing() else "ok", "workers": pool.workers,
                             "protections": list(pool.active)}, status_code=503 if closing() else 200)

    async def metrics(request: Request):
        try:
            svc.check_auth(request)
        except _Refused as e:
            return _refusal(svc, "/metrics", e)
        return JSONResponse(svc.metrics.snapshot(svc.pending, svc.running))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await asyncio.get_running_loop().run_in_executor(None, svc.start)
        yield
        svc.close()

    app = Starlette(routes=[Route("/run_code", run_code, methods=["POST"]), Route("/verify", verify, methods=["POST"]),
                            Route("/health", health, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])],
                    lifespan=lifespan)
    app.state.service = svc
    return app

"""The HTTP app of `codechat serve` (Starlette on uvicorn): one sandbox pool, started once, behind five routes.

    POST /run_code   SandboxFusion's contract, one program on one stdin (serve/runcode.py)
    POST /verify     a batch of completions against tasks -> codechat verdicts (serve/batch.py)
    GET  /health     {"status": "ok", workers, protections}  (no token needed)
    GET  /metrics    requests, programs/s, queue depth, statuses, p50/p99 latency (serve/metrics.py)

Operations, in the order a request meets them: the bearer token (every route but /health), then admission
(more than `max_pending` requests at once get 429 with Retry-After; during shutdown 503), both before any of the
body is read; then the body, within `body_timeout_s` (408) and `max_body_mb` (413); malformed JSON or fields get
400 naming the field. The work then runs in a thread under a `Cancel` (sandbox/cancel.py): a client that
disconnects has its sandbox runs killed and its slot freed at once, and a request not started on a worker
`queue_timeout_s` after it arrived gets 503 + Retry-After and never runs. Responses always encode (safejson.py).
Single runs go through a thread pool of one thread per sandbox worker, each borrowing one worker, so a burst
of single runs never starves a batch of all of them; batches run one at a time, each on every worker it can
borrow. A worker that dies mid-request gives that program `infra_error` (SandboxError on /run_code), is
replaced, and the server keeps serving.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from codechat.sandbox import cancel
from codechat.sandbox.cancel import Cancel, Expired
from codechat.sandbox.capture import captured
from codechat.serve import batch, runcode, safejson
from codechat.serve.config import ServeConfig
from codechat.serve.metrics import Metrics
from codechat.tasks import load_tasks
from codechat.verifier.dedup import DedupVerifier
from codechat.verifier.plus import PlusVerifier
from codechat.verifier.verify import Verifier

RETRY_FULL_S, RETRY_CLOSING_S = 1, 5
CLIENT_GONE = 499
_TIMEOUT = getattr(asyncio, "timeout", None)


class _JSON(JSONResponse):
    def render(self, content) -> bytes:
        return safejson.dumps(content)


class _Gone(Exception):
    """The client disconnected before its answer: its work was cancelled."""


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

        async def read():
            async for chunk in request.stream():
                buf.extend(chunk)
                if len(buf) > limit:
                    raise _Refused(413, f"request body is over the {limit}-byte limit")

        try:
            if _TIMEOUT is not None:  # Python 3.11+: a deadline on this task, no task of its own
                async with _TIMEOUT(self.cfg.body_timeout_s):
                    await read()
            else:
                await asyncio.wait_for(read(), self.cfg.body_timeout_s)
        except asyncio.TimeoutError:
            raise _Refused(408, f"the request body did not arrive within {self.cfg.body_timeout_s:g}s") from None
        except ClientDisconnect:  # the client left mid-body: nobody to answer
            raise _Gone() from None
        try:
            return safejson.loads(bytes(buf))
        except safejson.BadJSON as e:
            raise _Refused(400, str(e)) from None

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

    async def in_thread(self, request: Request, arrived: float, executor: ThreadPoolExecutor, fn, *args):
        """fn(*args) in `executor`, cancelled (its sandbox runs killed) if the client disconnects first, and
        never started past the request's queue deadline (503)."""
        c = Cancel(start_by=arrived + self.cfg.queue_timeout_s)

        def job():
            c.begin()
            with cancel.scope(c):
                return fn(*args)

        self.running += 1
        fut = asyncio.get_running_loop().run_in_executor(executor, job)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({fut, gone}, timeout=max(0.0, c.start_by - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done and c.expire():
                fut.cancel()
                raise Expired("not started before the deadline")
            if not done:
                done, _ = await asyncio.wait({fut, gone}, return_when=asyncio.FIRST_COMPLETED)
            if fut not in done:
                c.cancel()
                fut.cancel()
                raise _Gone()
            return fut.result()
        except Expired:
            raise _Refused(503, f"no sandbox worker was free within {self.cfg.queue_timeout_s:g}s of the "
                                f"request's arrival", {"Retry-After": str(RETRY_FULL_S)}) from None
        finally:
            gone.cancel()
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


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (after the body was read, the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _retried(fn, *args):
    """fn(*args), run again when it raised SystemError: CPython 3.11's `ast` keeps its recursion count per
    interpreter, so two threads parsing at once (a /verify's task loading beside a running batch) can fail
    one of them with "AST constructor recursion depth mismatch"; the work itself is pure and repeatable."""
    for attempt in range(3):
        try:
            return fn(*args)
        except SystemError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _refusal(svc: Service, endpoint: str, e: _Refused) -> JSONResponse:
    svc.metrics.request(endpoint, e.status)
    return _JSON({"error": str(e)}, status_code=e.status, headers=e.headers)


def _gone(svc: Service, endpoint: str) -> Response:
    svc.metrics.request(endpoint, CLIENT_GONE)  # nginx's 499: nobody reads this answer
    return Response(status_code=CLIENT_GONE)


def build_app(cfg: ServeConfig, closing: Callable[[], bool] = lambda: False) -> Starlette:
    svc = Service(cfg, closing)

    async def run_code(request: Request):
        t0 = time.monotonic()
        try:
            svc.check_auth(request)
            with svc.admitted():
                req = await svc.body(request)
                try:
                    job = runcode.parse(req, cfg)
                except runcode.BadRunRequest as e:
                    raise _Refused(400, str(e)) from None
                except runcode.Unsupported as e:
                    resp = runcode.sandbox_error(str(e))
                else:
                    resp = await svc.in_thread(request, t0, svc.single, svc.run_one, job)
        except _Refused as e:
            return _refusal(svc, "/run_code", e)
        except _Gone:
            return _gone(svc, "/run_code")
        svc.metrics.request("/run_code", 200)
        svc.metrics.done("/run_code", time.monotonic() - t0, [runcode.run_status_key(resp)])
        return _JSON(resp)

    async def verify(request: Request):
        t0 = time.monotonic()
        try:
            svc.check_auth(request)
            with svc.admitted():
                req = await svc.body(request)
                try:  # loading task records is CPU work: off the event loop, beside (not behind) batches
                    pairs, ids = await asyncio.get_running_loop().run_in_executor(
                        None, _retried, batch.parse, req, svc.loaded, cfg.max_batch, cfg.max_task_timeout_s)
                except batch.BadVerifyRequest as e:
                    raise _Refused(413 if "over the limit" in str(e) else 400, str(e)) from None
                verdicts, stats = await svc.in_thread(request, t0, svc.batch, _retried, svc.verify_batch, pairs)
        except _Refused as e:
            return _refusal(svc, "/verify", e)
        except _Gone:
            return _gone(svc, "/verify")
        svc.metrics.request("/verify", 200)
        svc.metrics.done("/verify", time.monotonic() - t0, [v.status for v in verdicts])
        return _JSON({"verdicts": [{**i, **v.to_dict()} for i, v in zip(ids, verdicts)], "stats": stats})

    async def health(request: Request):
        pool = svc.verifier.pool
        return _JSON({"status": "closing" if closing() else "ok", "workers": pool.workers,
                             "protections": list(pool.active)}, status_code=503 if closing() else 200)

    async def metrics(request: Request):
        try:
            svc.check_auth(request)
        except _Refused as e:
            return _refusal(svc, "/metrics", e)
        return _JSON(svc.metrics.snapshot(svc.pending, svc.running))

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

"""Evaluating a model behind an OpenAI-compatible API (`vllm serve`, SGLang, TGI, a hosted API).

    codechat eval --endpoint http://localhost:8000 --model Qwen/Qwen2.5-Coder-1.5B-Instruct --tasks builtin --n 10

Each task's prompt (the text a local model continues, rollout/collect.py `prompt_text`) goes to
/v1/chat/completions as one user turn (--api chat) or to /v1/completions as it is (--api completions), n samples
per request (`n`; servers that return fewer choices are asked again for the rest). The completions are verified
and scored by the same code as a local evaluation (evaluate.py `score_records`, `summarize`), so pass@k, the
reports and `--compare` mean the same thing. Only the standard library speaks HTTP here (urllib), so the command
needs no extra package.

Failures: connection refused, a refused API key (401/403) and a model name the server does not serve end the
command with one line naming the endpoint; 429, 5xx and dropped connections are retried with exponential backoff
(honouring Retry-After) up to --retries times per request.
"""
from __future__ import annotations

import json
import os
import random
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.client import HTTPException
from typing import Callable

from codechat import CodechatError
from codechat.config import SamplingConfig
from codechat.evaluation.evaluate import EvalReport, score_records, summarize
from codechat.evaluation.thinking import bucket_metrics, mode_metrics
from codechat.tasks import Task

RETRY_CODES = {408, 409, 429, 500, 502, 503, 504}
API_KEY_ENV = "OPENAI_API_KEY"


@dataclass
class EndpointConfig:
    """Where the model is served and how to talk to it."""

    url: str
    """Server address, with or without the /v1 suffix."""
    model: str
    """Model name as the server knows it (the `model` field of each request)."""
    api: str = "chat"
    """chat: /v1/chat/completions (the prompt is one user turn); completions: /v1/completions (raw continuation)."""
    api_key: str = ""
    """Bearer token; empty: none sent."""
    retries: int = 5
    """Retries per request on 429, 5xx and dropped connections."""
    timeout_s: float = 600.0
    """Seconds to wait for one response."""
    concurrency: int = 8
    """Requests in flight at once."""
    backoff_s: float = 1.0
    """First retry delay (doubled each retry, with jitter) when the server sends no Retry-After."""


def base_url(url: str) -> str:
    """http://host:8000, http://host:8000/ and http://host:8000/v1 -> http://host:8000/v1."""
    u = url.strip().rstrip("/")
    if not u.startswith(("http://", "https://")):
        raise CodechatError(f"eval: --endpoint must be an http(s):// URL, got '{url}'")
    return u if u.endswith("/v1") else u + "/v1"


class Endpoint:
    """A client of one served model: `sample(prompt, n, ...)` -> n (text, finish_reason), and token counts."""

    def __init__(self, cfg: EndpointConfig):
        if cfg.api not in ("chat", "completions"):
            raise CodechatError(f"eval: --api must be chat or completions, got '{cfg.api}'")
        self.cfg = cfg
        self.base = base_url(cfg.url)
        self.completion_tokens = 0
        self.retried = 0

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict, dict]:
        """(HTTP status, headers, JSON body). Raises OSError/HTTPException on transport failures."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.cfg.api_key:
            req.add_header("Authorization", f"Bearer {self.cfg.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.timeout_s) as r:
                return r.status, dict(r.headers), json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {"error": {"message": raw.decode(errors="replace")[:300]}}
            return e.code, dict(e.headers or {}), payload if isinstance(payload, dict) else {"error": payload}

    def _refused(self, code: int, payload: dict) -> CodechatError:
        msg = error_message(payload)
        if code in (401, 403):
            return CodechatError(f"eval: {self.base} refused the request ({code} {msg or 'unauthorized'}): "
                                 f"give the API key with --api-key or ${API_KEY_ENV}")
        if code == 404 or "model" in msg.lower() and code in (400, 422):
            return CodechatError(f"eval: {self.base} does not serve model '{self.cfg.model}' ({code}: {msg}); "
                                 f"check --model")
        return CodechatError(f"eval: {self.base} answered {code}: {msg or 'no message'}")

    def _unreachable(self, e: BaseException) -> CodechatError:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ConnectionRefusedError):
            return CodechatError(f"eval: cannot connect to {self.base} (connection refused): is the server running?")
        return CodechatError(f"eval: cannot reach {self.base}: {reason}")

    def check(self) -> None:
        """Fail early and clearly: the server is up, accepts the key, and serves the model (where it lists its
        models at /v1/models; servers without that route are checked by the first completion)."""
        try:
            code, _, payload = self._request("GET", "/models")
        except (OSError, HTTPException) as e:
            raise self._unreachable(e) from None
        if code in (401, 403):
            raise self._refused(code, payload)
        if code != 200:
            return
        served = [m.get("id") for m in payload.get("data") or [] if isinstance(m, dict)]
        if served and self.cfg.model not in served:
            raise CodechatError(f"eval: {self.base} does not serve model '{self.cfg.model}' (it serves: "
                                f"{', '.join(map(str, served[:10]))}); check --model")

    def post(self, path: str, body: dict) -> dict:
        """POST with retries on 429/5xx/dropped connections; user-caused refusals raise CodechatError at once."""
        delay = self.cfg.backoff_s
        for attempt in range(self.cfg.retries + 1):
            last = ""
            try:
                code, headers, payload = self._request("POST", path, body)
            except (OSError, HTTPException) as e:
                code, headers, payload, last = 0, {}, {}, f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            if code == 200:
                return payload
            if code and code not in RETRY_CODES:
                raise self._refused(code, payload)
            last = last or f"{code} {error_message(payload)}".strip()
            if attempt == self.cfg.retries:
                raise CodechatError(f"eval: {self.base}{path} still failing after {self.cfg.retries} retries "
                                    f"({last})")
            self.retried += 1
            wait = retry_after(headers)
            time.sleep(wait if wait is not None else delay * (1 + random.random() * 0.25))
            delay *= 2
        raise AssertionError("unreachable")

    def sample(self, prompt: str, n: int, temperature: float, sampling: SamplingConfig,
               seed: int) -> list[tuple[str, str]]:
        """n completions of `prompt`: (text, finish_reason) each, in the server's choice order."""
        out: list[tuple[str, str]] = []
        while len(out) < n:
            body = {"model": self.cfg.model, "n": n - len(out), "temperature": temperature,
                    "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens, "seed": seed + len(out)}
            if sampling.top_k > 0:
                body["top_k"] = sampling.top_k  # vLLM, SGLang and TGI accept it beyond the OpenAI fields
            if sampling.stop:
                body["stop"] = list(sampling.stop)
            if self.cfg.api == "chat":
                body["messages"] = [{"role": "user", "content": prompt}]
                payload = self.post("/chat/completions", body)
            else:
                body["prompt"] = prompt
                payload = self.post("/completions", body)
            choices = sorted(payload.get("choices") or [], key=lambda c: c.get("index", 0))
            if not choices:
                raise CodechatError(f"eval: {self.base} answered with no choices: {str(payload)[:200]}")
            for c in choices[:n - len(out)]:
                text = (c.get("message") or {}).get("content") if self.cfg.api == "chat" else c.get("text")
                out.append((text if isinstance(text, str) else "", str(c.get("finish_reason") or "")))
            usage = payload.get("usage") or {}
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
        return out


def error_message(payload: dict) -> str:
    err = payload.get("error", payload.get("message", payload.get("detail", "")))
    if isinstance(err, dict):
        err = err.get("message", "")
    return " ".join(str(err).split())[:300]


def retry_after(headers: dict) -> float | None:
    v = {k.lower(): val for k, val in headers.items()}.get("retry-after")
    try:
        return min(max(float(v), 0.0), 60.0) if v is not None else None
    except ValueError:
        return None


def api_key(flag: str | None) -> str:
    return flag if flag else os.environ.get(API_KEY_ENV, "")


def evaluate_endpoint(client: Endpoint, verifier, tasks: list[Task], n: int, ks: list[int],
                      temperature: float = 1.0, greedy: bool = True, sampling: SamplingConfig | None = None,
                      seed: int = 1234, prompts_per_batch: int = 16,
                      progress: Callable[[int, int], None] | None = None, thinking: bool = False,
                      reference: dict[str, float] | None = None) -> EvalReport:
    """evaluate_policy's report for a served model: n samples per task (and one greedy), verified while later
    requests are in flight; tokens_per_s is the server's completion tokens per wall second of the whole
    evaluation. Call `client.check()` before starting the verifier: a down server, a wrong key or model then
    fails before any work."""
    # torch: rollout.collect imports it, and evaluating a served model runs without it
    from codechat.rollout.collect import prompt_text  # the same prompt text a local model continues

    sampling = sampling or SamplingConfig()
    t0 = time.perf_counter()
    records, greedy_ok = [], {}
    with ThreadPoolExecutor(max(1, client.cfg.concurrency)) as pool:
        jobs = []
        for i, t in enumerate(tasks):
            p = prompt_text(t)
            s = pool.submit(client.sample, p, n, temperature, sampling, seed + i) if n > 0 else None
            g = pool.submit(client.sample, p, 1, 0.0, sampling, seed) if greedy else None
            jobs.append((t, s, g))
        for start in range(0, len(jobs), prompts_per_batch):
            chunk = jobs[start:start + prompts_per_batch]
            pairs, meta = [], []
            for t, s, g in chunk:
                for j, (text, finish) in enumerate(s.result() if s else []):
                    pairs.append((t, text))
                    meta.append(("sample", j, finish))
                if g:
                    text, finish = g.result()[0]
                    pairs.append((t, text))
                    meta.append(("greedy", 0, finish))
            for rec, (kind, j, finish) in zip(score_records(verifier, pairs), meta):
                if kind == "greedy":
                    greedy_ok[rec["task_id"]] = rec["passed"]
                    continue
                rec.update({"sample": j, "finish_reason": finish})
                records.append(rec)
            if progress is not None:
                progress(start + len(chunk), len(tasks))
    wall = time.perf_counter() - t0
    report = summarize(records, list(ks), greedy_ok if greedy else None)
    report.metrics["tokens_per_s"] = client.completion_tokens / max(wall, 1e-9)
    if records:
        report.metrics["truncated_frac"] = sum(r["finish_reason"] == "length" for r in records) / len(records)
    if thinking:
        report.metrics.update(mode_metrics(records, verifier.cfg.thinking.open))
    if reference:
        report.metrics.update(bucket_metrics(records, reference))
    return report

"""SandboxFusion's `/run_code` contract on codechat's sandbox: request parsing and the response it returns.

Request  {code, stdin, language, run_timeout, compile_timeout, memory_limit_MB, files, fetch_files}
Response {status, message, compile_result, run_result: {status, execution_time, return_code, stdout, stderr},
          executor_pod_name, files}
`status`: `Success` (the program ran and exited 0), `Failed` (it ran and exited nonzero, timed out or printed
too much), `SandboxError` (nothing was judged: a request codechat cannot run, or the sandbox failed).
`run_result.status`: `Finished` (it reached its exit; see `return_code`), `TimeLimitExceeded`, `Error`.
Python programs compile when they run, so `compile_result` is null and a syntax error is a `Finished` run with
return code 1 and the message on stderr, as `python main.py` gives. verl's client reads TimeLimitExceeded as a
timeout, a nonzero return code as a runtime error and SandboxError as an error.

Supported: `language` python (also python3); `files` / `fetch_files` must be empty (the sandbox's cwd is a fresh
temp dir the caller cannot fill); `compile_timeout` is accepted and unused (nothing compiles ahead).
"""
from __future__ import annotations

import math
from typing import Any

from codechat.sandbox.capture import Captured, capture_job
from codechat.sandbox.pool import Job
from codechat.serve.config import ServeConfig

PYTHON = ("python", "python3")


class BadRunRequest(ValueError):
    """A /run_code request codechat cannot run (answered as SandboxError naming the field)."""


def _number(req: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = req.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadRunRequest(f"{key} must be a number, got {v!r}"[:200])
    if not lo < v <= hi:
        raise BadRunRequest(f"{key} must be in ({lo:g}, {hi:g}], got {v:g}")
    return float(v)


def parse(req: Any, cfg: ServeConfig) -> Job:
    """The capture job of one request; raises BadRunRequest with a one-line reason."""
    if not isinstance(req, dict):
        raise BadRunRequest("the request body must be a JSON object")
    lang = req.get("language", "python")
    if lang not in PYTHON:
        raise BadRunRequest(f"language {lang!r} is not supported by codechat serve (supported: python)"[:200])
    code, stdin = req.get("code"), req.get("stdin") or ""
    if not isinstance(code, str):
        raise BadRunRequest("code must be a string")
    if not isinstance(stdin, str):
        raise BadRunRequest("stdin must be a string")
    if req.get("files"):
        raise BadRunRequest("files are not supported by codechat serve (send an empty object)")
    if req.get("fetch_files"):
        raise BadRunRequest("fetch_files are not supported by codechat serve (send an empty list)")
    timeout = _number(req, "run_timeout", cfg.run_timeout_s, 0, cfg.max_run_timeout_s)
    _number(req, "compile_timeout", 10.0, 0, math.inf)
    memory = _number(req, "memory_limit_MB", cfg.memory_mb, 63, 1 << 20)
    return capture_job(code, stdin.encode("utf-8"), timeout_s=timeout, memory_mb=int(memory),
                       max_stdout_bytes=int(cfg.max_stdout_mb * (1 << 20)),
                       max_stderr_bytes=cfg.verifier.max_output_bytes)


def _response(status: str, message: str = "", run_result: dict | None = None) -> dict:
    return {"status": status, "message": message, "compile_result": None, "run_result": run_result,
            "executor_pod_name": None, "files": {}}


def sandbox_error(message: str) -> dict:
    return _response("SandboxError", message)


def response(c: Captured) -> dict:
    """The SandboxFusion response of one capture."""
    if c.status == "sandbox_error":
        return sandbox_error(f"the sandbox failed: {c.stderr}"[:500])
    if c.status == "finished":
        run = {"status": "Finished", "execution_time": round(c.wall_s, 6), "return_code": c.return_code,
               "stdout": c.stdout, "stderr": c.stderr}
        return _response("Success" if c.return_code == 0 else "Failed", "", run)
    if c.status == "compile_error":
        run = {"status": "Finished", "execution_time": round(c.wall_s, 6), "return_code": 1, "stdout": "",
               "stderr": c.stderr + "\n"}
        return _response("Failed", "", run)
    run_status = "TimeLimitExceeded" if c.status == "timeout" else "Error"
    msg = "" if c.status == "timeout" else "the program's output exceeded the limit"
    run = {"status": run_status, "execution_time": round(c.wall_s, 6), "return_code": None, "stdout": "",
           "stderr": c.stderr}
    return _response("Failed", msg, run)


def run_status_key(resp: dict) -> str:
    """The metrics label of one response: its run status, or its top-level status when nothing ran."""
    rr = resp.get("run_result")
    if not rr:
        return resp["status"]
    if rr["status"] == "Finished":
        return "Finished" if rr["return_code"] == 0 else "Finished(nonzero)"
    return rr["status"]

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

Supported: `language` python (also python3); `files` ({relative path: base64 content}, written into the program's
fresh working directory before it runs); `fetch_files` must be empty; `compile_timeout` is checked and unused
(nothing compiles ahead). Limits are the client's clamped to the operator's: `run_timeout` to `--max-run-timeout`,
`memory_limit_MB` to `--memory-mb` (-1, SandboxFusion's default, means that cap). A malformed field (a wrong type,
a negative or zero limit, a lone surrogate in `code` or `stdin`) is a 400 naming it; a well-formed request codechat
cannot run (another language, fetch_files) is a SandboxError saying why.
"""
from __future__ import annotations

import base64
import binascii
import math
from typing import Any

from codechat.sandbox.capture import Captured, capture_job
from codechat.sandbox.pool import Job
from codechat.serve.config import ServeConfig

PYTHON = ("python", "python3")
MAX_FILES = 64
"""Most entries in a request's `files`."""


class BadRunRequest(ValueError):
    """A malformed /run_code request: a field of the wrong type or out of range (answered 400 naming it)."""


class Unsupported(ValueError):
    """A well-formed request codechat cannot run, e.g. another language (answered as SandboxError saying why)."""


def _number(req: dict, key: str, default: float, lo: float, cap: float) -> float:
    """The request's `key`: a finite number above `lo`, clamped to the operator's `cap`; absent = default."""
    v = req.get(key)
    if v is None:
        return min(default, cap)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadRunRequest(f"{key} must be a number, got {v!r}"[:200])
    if not v > lo:
        raise BadRunRequest(f"{key} must be above {lo:g}, got {v:g}")
    return float(min(v, cap))


def _text(req: dict, key: str) -> str:
    v = req.get(key)
    v = "" if v is None and key == "stdin" else v
    if not isinstance(v, str):
        raise BadRunRequest(f"{key} must be a string")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate (JSON's "\ud800"): not text a program can read
        raise BadRunRequest(f"{key} holds a lone surrogate at character {e.start}, which is not UTF-8") from None
    return v


def _files(req: dict) -> dict[str, bytes]:
    """SandboxFusion's `files`: {relative path: base64 content}, written beside the program before it runs."""
    files = req.get("files") or {}
    if not isinstance(files, dict):
        raise BadRunRequest("files must be an object {path: base64 content}")
    if len(files) > MAX_FILES:
        raise BadRunRequest(f"files: {len(files)} files is over the limit of {MAX_FILES}")
    out = {}
    for path, data in files.items():
        parts = path.split("/")
        if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path \
                or len(path) > 255:
            raise BadRunRequest(f"files: {path[:80]!r} is not a relative path inside the working directory")
        if data is None:
            data = ""
        if not isinstance(data, str):
            raise BadRunRequest(f"files[{path[:80]!r}] must be base64 text")
        try:
            out[path] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise BadRunRequest(f"files[{path[:80]!r}] is not base64") from None
    return out


def parse(req: Any, cfg: ServeConfig) -> Job:
    """The capture job of one request. Limits are the client's, clamped to the operator's (`memory_limit_MB`
    -1, SandboxFusion's default, means the operator's cap). Raises BadRunRequest or Unsupported."""
    if not isinstance(req, dict):
        raise BadRunRequest("the request body must be a JSON object")
    lang = req.get("language", "python")
    if not isinstance(lang, str):
        raise BadRunRequest("language must be a string")
    code, stdin = _text(req, "code"), _text(req, "stdin")
    files = _files(req)
    timeout = _number(req, "run_timeout", cfg.run_timeout_s, 0, cfg.max_run_timeout_s)
    _number(req, "compile_timeout", 10.0, 0, math.inf)  # checked, unused: nothing compiles ahead
    memory = req.get("memory_limit_MB")
    memory = cfg.memory_mb if memory in (None, -1) else _number(req, "memory_limit_MB", cfg.memory_mb, 63,
                                                                 cfg.memory_mb)
    if lang not in PYTHON:
        raise Unsupported(f"language {lang!r} is not supported by codechat serve (supported: python)"[:200])
    if req.get("fetch_files"):
        raise Unsupported("fetch_files are not supported by codechat serve (send an empty list)")
    job = capture_job(code, stdin.encode("utf-8"), timeout_s=timeout, memory_mb=int(memory),
                      max_stdout_bytes=int(cfg.max_stdout_mb * (1 << 20)),
                      max_stderr_bytes=cfg.verifier.max_output_bytes)
    job.files = files
    return job


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

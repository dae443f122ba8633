"""`codechat eval --endpoint`: a model behind an OpenAI-compatible API (a stub server on a free port, answering
scripted completions) gets the same pass@k as `eval --completions` on the same completions; n samples, greedy,
both APIs, servers that ignore `n`; 429/503 retried; connection refused, a refused key and an unknown model
name end with one line."""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codechat.cli import main
from codechat.tasks import load_tasks

TASKS = load_tasks("builtin:toy")[:3]
RIGHT = "```python\ndef f(x):\n    return x + 1\n```"
WRONG = "def f(x):\n    return x\n"
# per task: the completions the stub answers, in order (the first is also the greedy answer)
SCRIPT = {TASKS[0].task_id: [RIGHT, RIGHT, WRONG, RIGHT], TASKS[1].task_id: [WRONG, WRONG, WRONG, RIGHT],
          TASKS[2].task_id: [WRONG, WRONG, WRONG, WRONG]}


class Stub:
    """An OpenAI-compatible server: /v1/models, /v1/chat/completions, /v1/completions."""

    def __init__(self, key: str = "", fail: list[int] = (), max_n: int = 0, models: bool = True):
        self.key, self.fail, self.max_n, self.models = key, list(fail), max_n, models
        self.requests: list[dict] = []
        self.served: dict[str, int] = {}
        by_prompt = {t.prompt: t.task_id for t in TASKS}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send(self, code: int, body: dict, headers: dict | None = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def authorized(self) -> bool:
                if stub.key and self.headers.get("Authorization") != f"Bearer {stub.key}":
                    self.send(401, {"error": {"message": "invalid api key"}})
                    return False
                return True

            def do_GET(self):
                if not stub.models:
                    return self.send(404, {"detail": "Not Found"})
                if self.authorized():
                    self.send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.authorized():
                    return
                if stub.fail:
                    return self.send(stub.fail.pop(0), {"error": {"message": "busy"}}, {"Retry-After": "0"})
                if body["model"] != "tiny":
                    return self.send(404, {"error": {"message": f"The model `{body['model']}` does not exist."}})
                stub.requests.append({"path": self.path, **body})
                chat = self.path == "/v1/chat/completions"
                prompt = body["messages"][0]["content"] if chat else body["prompt"]
                tid = by_prompt[prompt.rstrip("\n")]
                script = SCRIPT[tid]
                n = min(body["n"], stub.max_n or body["n"])
                if body["temperature"] == 0:
                    texts = [script[0]]
                else:
                    start = stub.served.get(tid, 0)
                    texts = [script[(start + i) % len(script)] for i in range(n)]
                    stub.served[tid] = start + n
                choices = [{"index": i, "finish_reason": "stop",
                            **({"message": {"role": "assistant", "content": t}} if chat else {"text": t})}
                           for i, t in enumerate(texts)]
                self.send(200, {"choices": choices, "usage": {"completion_tokens": 7 * len(texts)}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    made = []

    def make(**kw) -> Stub:
        made.append(Stub(**kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


def summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def endpoint_eval(url: str, out, *extra: str) -> int:
    return main(["eval", "--endpoint", url, "--model", "tiny", "--tasks", "builtin:toy", "--limit", "3",
                 "--n", "4", "--k", "1,2,4", "--workers", "1", "--out", str(out), *extra])


@pytest.mark.parametrize("api,max_n", [("chat", 0), ("completions", 1)])
def test_pass_at_k_equals_local_eval_on_the_same_completions(stub, tmp_path, api, max_n):
    s = stub(max_n=max_n)  # max_n=1: a server that ignores n is asked again for the rest
    assert endpoint_eval(s.url, tmp_path / "remote", "--api", api, "--temperature", "0.7",
                         "--max-new-tokens", "300") == 0
    lines = [json.dumps({"task_id": tid, "completion": c}) for tid, cs in SCRIPT.items() for c in cs]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["eval", "--completions", str(tmp_path / "c.jsonl"), "--tasks", "builtin:toy", "--limit", "3",
                 "--k", "1,2,4", "--workers", "1", "--out", str(tmp_path / "local")]) == 0
    remote, local = summary(tmp_path / "remote"), summary(tmp_path / "local")
    for k in ("pass@1", "pass@2", "pass@4"):
        assert remote["metrics"][k] == pytest.approx(local["metrics"][k]), k
    assert remote["metrics"]["pass@1"] == pytest.approx((3 / 4 + 1 / 4 + 0) / 3)
    assert {t: (v["n"], v["c"]) for t, v in remote["per_task"].items()} == \
           {t: (v["n"], v["c"]) for t, v in local["per_task"].items()}
    assert remote["metrics"]["greedy_pass@1"] == pytest.approx(1 / 3)  # only task 0's first answer is right
    assert remote["provenance"]["endpoint"] == s.url and remote["provenance"]["api"] == api
    sampled = [r for r in s.requests if r["temperature"] != 0]
    assert all(r["path"] == f"/v1/{'chat/' if api == 'chat' else ''}completions" for r in s.requests)
    assert all(r["max_tokens"] == 300 and r["temperature"] == 0.7 for r in sampled)
    assert len(sampled) == (3 if max_n == 0 else 12) and sampled[0]["n"] == (4 if max_n == 0 else 4)


def test_overload_and_server_errors_are_retried(stub, tmp_path):
    s = stub(fail=[429, 503, 502])
    assert endpoint_eval(s.url, tmp_path / "o", "--no-greedy", "--concurrency", "1") == 0
    assert summary(tmp_path / "o")["metrics"]["pass@1"] == pytest.approx((3 / 4 + 1 / 4) / 3)
    s2 = stub(fail=[503] * 3)
    assert endpoint_eval(s2.url, tmp_path / "p", "--no-greedy", "--concurrency", "1", "--retries", "2") == 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_user_errors_end_with_one_line(stub, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cases = [(f"http://127.0.0.1:{free_port()}", {}, [], "connection refused"),
             (None, {"key": "secret"}, [], "refused the request (401 invalid api key): give the API key"),
             (None, {}, ["--model", "big"], "does not serve model 'big' (it serves: tiny)"),
             (None, {"models": False}, ["--model", "big"], "does not serve model 'big' (404: The model `big`"),
             ("localhost:8000", {}, [], "--endpoint must be an http(s):// URL")]
    for i, (url, kw, extra, message) in enumerate(cases):
        url = url or stub(**kw).url
        assert endpoint_eval(url, tmp_path / str(i), *extra) == 2, message
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["eval", "--model", "tiny", "--tasks", "builtin:toy", "--api-key", "x"]) == 2
    assert "--api-key apply to --endpoint only" in capsys.readouterr().err


def test_api_key_from_the_environment(stub, tmp_path, monkeypatch):
    s = stub(key="secret")
    monkeypatch.setenv("OPENAI_API_KEY", "secret")
    assert endpoint_eval(s.url, tmp_path / "k", "--no-greedy", "--n", "1", "--k", "1") == 0
    assert summary(tmp_path / "k")["metrics"]["pass@1"] == pytest.approx(1 / 3)

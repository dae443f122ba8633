"""`codechat chat`: streaming equals the sampler, multi-turn prompts, slash commands, /test per assert, /save ->
task loader -> /load, CLI errors, --once on the tiny preset, and one scripted terminal session (pexpect) with
Ctrl-C and /run on a hostile block. /run containment: test_chat_run.py.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from codechat import CodechatError
from codechat.chat.session import ChatSession, Turn, held_back
from codechat.chat.run import split_tests
from codechat.config import SamplingConfig, VerifierConfig
from codechat.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]


from chat_helpers import fence, one_thread, planted, policy, sandbox_session  # noqa: E402,F401 - fixtures


# --- generation ---------------------------------------------------------------------------------------------------
def test_streamed_answers_equal_the_sampler(policy):
    """Answer i streams exactly what Sampler.sample(prompt, n=1) draws with seed + i, turn after turn."""
    from codechat.policy import Sampler

    cfg = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=12, seed=3)
    s = ChatSession(policy, cfg)
    for i, q in enumerate(["Write add(a, b).", "Now make it subtract."]):
        prompt = s.prompt_ids(s.turns + [Turn(q)])
        pieces = list(s.ask(q))
        ref = Sampler(policy).sample([prompt], 1, SamplingConfig(**{**cfg.__dict__, "seed": 3 + i}))
        assert "".join(pieces) == s.turns[-1].answer == ref.texts[0]
        assert s.turns[-1].finish == ref.finish_reason[0]


def test_prompts_use_the_chat_template_or_plain_text(policy):
    s = ChatSession(policy)
    assert s.prompt_format == "chat"
    turns = [Turn("q1", "a1", "stop"), Turn("q2")]
    expect = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}],
        add_generation_prompt=True, tokenize=True)
    assert s.prompt_ids(turns) == list(expect["input_ids"] if hasattr(expect, "keys") else expect)
    plain = ChatSession(policy, prompt_format="plain")
    assert policy.decode(plain.prompt_ids(turns)) == "User: q1\nAssistant: a1\nUser: q2\nAssistant:"


def fake_tokens(session, text):
    ids = session.policy.tokenizer(text, add_special_tokens=False)["input_ids"]
    session.tokens = lambda prompt, cfg: iter(ids)


def test_plain_format_stops_at_the_next_user_turn(policy):
    s = ChatSession(policy, prompt_format="plain")
    fake_tokens(s, " x = 1\nprint(x)\nUser: and now?")
    assert "".join(s.ask("q")) == " x = 1\nprint(x)"
    assert s.turns[-1].finish == "stop"
    assert held_back("abc\nUs", ["\nUser:"]) == 3 and held_back("ab\ufffd", []) == 1
    ids = policy.tokenizer("done\nUs", add_special_tokens=False)["input_ids"] + [policy.eos_token_ids[0]]
    s.tokens = lambda prompt, cfg: iter(ids)
    assert "".join(s.ask("q")) == "done\nUs" and s.turns[-1].finish == "stop"  # held back, then shown at EOS


def test_stopping_keeps_the_partial_answer_and_the_session_goes_on(policy):
    s = ChatSession(policy, SamplingConfig(temperature=0, max_new_tokens=10))
    gen = s.ask("q")
    got = [next(gen) for _ in range(3)]
    import torch
    assert torch.is_grad_enabled()  # a suspended answer leaves no global state behind
    gen.close()  # what the terminal does on Ctrl-C
    assert s.turns[-1].finish == "interrupted" and s.turns[-1].answer == "".join(got)

    def interrupted(prompt, cfg):  # Ctrl-C arriving inside the model's forward
        yield from s.policy.tokenizer("ab cd ef", add_special_tokens=False)["input_ids"][:2]
        raise KeyboardInterrupt
    s.tokens = interrupted
    with pytest.raises(KeyboardInterrupt):
        list(s.ask("again"))
    assert s.turns[-1].finish == "interrupted"
    del s.tokens
    assert list(s.ask("third")) and s.turns[-1].finish in ("stop", "length") and len(s.turns) == 3


def test_old_turns_leave_the_prompt_when_the_context_is_full(policy):
    s = ChatSession(policy, SamplingConfig(max_new_tokens=1000))
    s.turns = [Turn("long question " * 20, "long answer " * 20, "stop"), Turn("short")]
    full = len(s.prompt_ids(s.turns))
    s.context_limit = lambda: full - 5
    prompt, max_new = s.fit_prompt()
    assert prompt == s.prompt_ids(s.turns[1:]) and max_new == full - 5 - len(prompt)
    s.context_limit = lambda: 3
    with pytest.raises(CodechatError, match="too long"):
        s.fit_prompt()


# --- slash commands -----------------------------------------------------------------------------------------------
def test_set_changes_validates_and_lists(policy):
    s = ChatSession(policy)
    assert s.handle("/set temperature 0.2") == "temperature = 0.2" and s.sampling.temperature == 0.2
    assert s.handle("/set max-new-tokens 64") == "max_new_tokens = 64" and s.sampling.max_new_tokens == 64
    s.handle("/set timeout 1.5")
    assert s.verifier_cfg.timeout_s == 1.5
    assert "top_p=1.0" in s.handle("/set")
    with pytest.raises(CodechatError, match="valid: temperature, top_p"):
        s.handle("/set warmth 1")
    with pytest.raises(CodechatError, match="expected a number"):
        s.handle("/set temperature hot")
    with pytest.raises(CodechatError, match="top_p"):
        s.handle("/set top_p 0")
    assert s.sampling.top_p == 1.0  # a rejected value changes nothing
    with pytest.raises(CodechatError, match="unknown command '/bogus'"):
        s.handle("/bogus")
    assert "/run" in s.handle("/help")
    s.handle("/quit")
    assert s.done


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("name", ["temperature", "top_p", "timeout"])
def test_set_refuses_values_that_are_not_finite(policy, name, value):
    """float() takes them, and `nan < 0` is False: without a check, `/set temperature nan` sampled with NaN."""
    s = ChatSession(policy)
    before = (s.sampling.temperature, s.sampling.top_p, s.verifier_cfg.timeout_s)
    with pytest.raises(CodechatError, match=f"/set {name}: expected a finite number"):
        s.handle(f"/set {name} {value}")
    assert (s.sampling.temperature, s.sampling.top_p, s.verifier_cfg.timeout_s) == before


# --- /test, /save, /load --------------------------------------------------------------------------------------------
ADD = fence("def add(a, b):\n    return a + b")


def test_test_reports_each_assert(planted):
    s = planted(ADD, "Write add(a, b).")
    lines = iter(["import math", "assert add(1, 2) == 3", "assert add(2, 2) == 5", "assert add(1, 1) == math.floor(2.5)", ""])
    out = s.handle("/test", read_line=lambda prompt: next(lines))
    got = out.splitlines()
    assert got[0] == "PASS  assert add(1, 2) == 3" and got[2:] == ["PASS  assert add(1, 1) == math.floor(2.5)", "2/3 passed"]
    assert got[1].startswith("FAIL  assert add(2, 2) == 5    [failed: AssertionError")
    turn = s.turns[-1]
    assert turn.entry_point == "add" and turn.setup == "import math" and len(turn.tests) == 3
    assert s.handle("/test assert add(0, 0) == 0").endswith("1/1 passed") and len(turn.tests) == 4
    with pytest.raises(CodechatError, match="no assert"):
        split_tests("x = 1")
    with pytest.raises(CodechatError, match="does not parse"):
        split_tests("assert (")


def test_save_is_a_task_file_and_load_resumes_it(planted, tmp_path):
    s = planted(ADD, "Write add(a, b).")
    s.handle("/test assert add(1, 2) == 3")
    s.turns.append(Turn("Explain it.", "It adds.", "stop"))
    out = tmp_path / "chat.jsonl"
    assert s.handle(f"/save {out}") == f"saved 2 turn(s) to {out}"
    tasks = load_tasks(out)
    assert [t.prompt for t in tasks] == ["Write add(a, b).", "Explain it."]
    assert tasks[0].tests == ["assert add(1, 2) == 3"] and tasks[0].entry_point == "add"
    assert tasks[0].solution == "def add(a, b):\n    return a + b\n"  # all asserts passed: a reference solution
    assert tasks[1].tests == [] and tasks[1].solution is None
    assert tasks[0].metadata["test_status"] == ["passed"] and tasks[1].metadata["answer"] == "It adds."
    from codechat.verifier.verify import Verifier
    with Verifier(VerifierConfig(workers=1)) as v:  # the saved task verifies the saved answer
        assert v.verify(tasks[0], tasks[0].metadata["answer"]).passed

    s.handle("/reset")
    assert s.turns == [] and s.handle(f"/load {out}") == f"loaded 2 turn(s) from {out}"
    assert [(t.question, t.answer, t.tests) for t in s.turns] == [
        ("Write add(a, b).", ADD, ["assert add(1, 2) == 3"]), ("Explain it.", "It adds.", [])]
    other = tmp_path / "tasks.jsonl"
    other.write_text(json.dumps({"task_id": "a", "prompt": "p", "tests": []}) + "\n")
    with pytest.raises(CodechatError, match="not a saved chat"):
        s.handle(f"/load {other}")
    with pytest.raises(CodechatError, match="no such file"):
        s.handle(f"/load {tmp_path / 'missing.jsonl'}")


# --- the command line -----------------------------------------------------------------------------------------------
def cli(argv, capsys):
    from codechat.cli import main
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_once_answers_on_stdout_with_the_tiny_preset(policy, capsys):
    from codechat.policy import Sampler

    rc, out, err = cli(["chat", "tiny", "--once", "Write add(a, b).", "--max-new-tokens", "12", "--seed", "5",
                        "--temperature", "0.7", "--top-p", "0.95", "--device", "cpu"], capsys)
    assert rc == 0, err
    prompt = ChatSession(policy).prompt_ids([Turn("Write add(a, b).")])  # the chat template, one user turn
    ref = Sampler(policy).sample([prompt], 1, SamplingConfig(temperature=0.7, top_p=0.95, max_new_tokens=12, seed=5))
    assert out == ref.texts[0] + "\n"


def test_missing_or_broken_model_is_one_clear_line(tmp_path, capsys):
    rc, _, err = cli(["chat", str(tmp_path / "nope"), "--once", "hi"], capsys)
    assert rc == 2 and err.startswith("codechat: error: ") and "no such model directory" in err
    import shutil

    from codechat.policy import preset_dir
    broken = tmp_path / "broken"
    shutil.copytree(preset_dir("tiny"), broken)
    (broken / "model.safetensors").write_bytes(b"not a checkpoint")
    rc, _, err = cli(["chat", str(broken), "--once", "hi"], capsys)
    assert rc == 2 and f"{broken}: cannot load the model" in err and err.count("\n") == 1
    (broken / "config.json").write_text("{")
    rc, _, err = cli(["chat", str(broken), "--once", "hi"], capsys)
    assert rc == 2 and "unreadable config.json" in err
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    rc, _, err = cli(["chat", str(run_dir), "--once", "hi"], capsys)
    assert rc == 2 and "no complete checkpoint" in err
    rc, _, err = cli(["chat", "tiny", "--top-p", "0", "--once", "hi"], capsys)
    assert rc == 2 and "top_p" in err


def test_scripted_terminal_session(tmp_path):
    """A real terminal: stream, /set, /run (whatever the model said, then a planted hostile block), Ctrl-C during
    /run, during an answer and at the prompt, /test, /save, /quit; history saved."""
    pexpect = pytest.importorskip("pexpect")
    from codechat.policy.presets import cache_root

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "presets").symlink_to(cache_root() / "presets")  # reuse the built preset, keep the history here
    env = {**os.environ, "CODECHAT_CACHE": str(cache), "TERM": "dumb", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "codechat", "chat", "tiny", "--temperature", "0", "--device", "cpu",
                                           "--max-new-tokens", "8"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", timeout=90, dimensions=(50, 200),
                          # started with SIGINT ignored, as a background job or an xdist worker starts it: Ctrl-C
                          # must still stop a /run (the chat restores Python's handler)
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        child.expect("you> ")
        child.sendline("Write a function add(a, b).")
        child.expect("model> ")
        child.expect("you> ")  # the spawn timeout (90 s): a loaded 2-core machine needs it
        child.sendline("/set temperature 0.2")
        child.expect("temperature = 0.2")
        child.sendline("/run")  # on whatever the model said (likely no code)
        child.expect(r"--- status: \w+")
        child.expect("you> ")

        hostile = tmp_path / "hostile.jsonl"
        code = f"import os\nos.kill({child.pid}, 9)\nos.kill(os.getppid(), 9)"
        hostile.write_text(json.dumps({"task_id": "h", "prompt": "q", "tests": [], "metadata": {
            "answer": fence(code)}}) + "\n")
        child.sendline(f"/load {hostile}")
        child.expect(r"loaded 1 turn")
        child.sendline("/run")
        child.expect("PermissionError|ProcessLookupError")  # (no host pid exists in the PID namespace)
        child.expect(r"--- status: error")
        child.expect("you> ")
        loop = tmp_path / "loop.jsonl"
        loop.write_text(json.dumps({"task_id": "l", "prompt": "q", "tests": [], "metadata": {
            "answer": fence("print('looping', flush=True)\nwhile True:\n    pass")}}) + "\n")
        child.sendline("/set timeout 1")
        child.sendline(f"/load {loop}")
        child.expect("loaded 1 turn")
        child.sendline("/run")
        time.sleep(0.4)  # inside /run (the program runs for 1 s)
        child.sendintr()  # stops waiting at once; the program ends by its time limit
        child.expect(r"\[stopped\]")
        child.expect("you> ")

        child.sendline("/set max_new_tokens 1000")
        child.expect("you> ")
        child.sendline("count to a thousand")
        child.expect("model> ")
        child.sendintr()
        child.expect(r"\[stopped\]")
        child.expect("you> ")
        child.sendintr()
        child.expect("Ctrl-C stops an answer")
        child.expect("you> ")

        good = tmp_path / "good.jsonl"
        good.write_text(json.dumps({"task_id": "g", "prompt": "Write add(a, b).", "tests": [], "metadata": {
            "answer": ADD}}) + "\n")
        child.sendline(f"/load {good}")
        child.expect("you> ")
        child.sendline("/test")
        for line in ["assert add(1, 2) == 3", "assert add(2, 2) == 5", ""]:
            child.expect_exact("... ")
            child.sendline(line)
        child.expect(r"PASS  assert add\(1, 2\) == 3")
        child.expect(r"FAIL  assert add\(2, 2\) == 5")
        child.expect("1/2 passed")
        child.sendline("/save out.jsonl")
        child.expect(r"saved 1 turn\(s\)")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    task = load_tasks(tmp_path / "out.jsonl")[0]
    assert task.tests == ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]
    assert task.metadata["test_status"] == ["passed", "failed"] and task.solution is None
    assert "/set temperature 0.2" in (cache / "chat_history").read_text()

"""Chat with a policy: multi-turn prompts, answers streamed token by token, and answers run in the sandbox.

`ChatSession` is the whole chat without a terminal (codechat/commands/chat.py adds readline, Ctrl-C and stdout;
the slash commands are chat/slash.py):

    s = ChatSession(load_policy(ModelConfig(path="tiny")), SamplingConfig(temperature=0.2, max_new_tokens=256))
    for piece in s.ask("Write a function add(a, b)."):
        print(piece, end="", flush=True)
    print(s.handle("/run"))                        # last code block of the last answer, in the sandbox
    print(s.handle("/test assert add(1, 2) == 3"))  # per-assert results, through the verifier
    s.handle("/save chat.jsonl")                    # one task per turn, in our task schema

Prompts: the tokenizer's chat template over the whole conversation when it has one (`prompt_format="chat"`),
else plain text, `User: ...\\nAssistant: ...` per turn, with generation stopped at `\\nUser:` (`"plain"`), or
`"raw"`: the way a run with `model.chat: false` trained, each question continued as is (`prompt_text`: ends in a
newline), earlier turns as question + answer lines before it. `trained=True` (a run's model) poses every question
as training posed a task (`prompt_text`) in the chat template too, and adds the run's stop strings.
Sampling: the sampler's own logit processing and inverse-CDF draw (codechat/policy/sampler.py), one sequence,
KV-cached through the policy's decoders; answer i of a session uses seed `seed + i`, so an answer equals
`Sampler.sample(prompt, n=1)` with that seed (tested), and a session replays exactly with the same questions.
Sandbox: `/run` and `/test` use the verifier's sandbox with its isolation and limits (codechat/chat/run.py says
what that protects against). Docs: docs/chat.md.

Simplifications: when the conversation outgrows the model's context (max_position_embeddings), the oldest
turns are left out of the prompt (they stay in the history and in `/save`); generation is capped so prompt +
answer fit. No system prompt. `/run` gives the program no stdin (input() raises EOFError).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from codechat import CodechatError
from codechat.chat import slash
from codechat.chat.run import (AssertResult, RunReport, guess_entry_point, run_program, split_tests,
                              check_asserts)
from codechat.config import SamplingConfig, VerifierConfig
from codechat.chat.stdio_test import check_io, parse_io_tests
from codechat.policy.decoding import make_decoder
from codechat.policy.fastlm import unwrap
from codechat.policy.sampler import choose, process_logits, validate
from codechat.rollout.collect import prompt_text
from codechat.tasks import Task, load_tasks, save_tasks
from codechat.verifier.extract import extract_code
from codechat.verifier.verify import Verifier

PLAIN_STOP = "\nUser:"


def prompt_text_of(question: str) -> str:
    """A question posed as training poses a task's prompt (rollout.collect.prompt_text)."""
    return prompt_text(Task("chat", question, []))

@dataclass
class Turn:
    """One question and the model's answer, plus what the user checked about it."""
    question: str
    answer: str = ""
    """The answer text (special tokens dropped); partial when generation was stopped."""
    finish: str = ""
    """`stop` (EOS / stop string), `length` (max_new_tokens or context full), `interrupted`; '' while streaming."""
    tests: list[str] = field(default_factory=list)
    """Asserts the user pasted with /test (each once, in order)."""
    setup: str = ""
    """Non-assert statements pasted with them (imports, constants), run before the tests."""
    entry_point: str | None = None
    """The answer's function the asserts call."""
    results: list[AssertResult] = field(default_factory=list)
    """Latest verdict per assert."""


class ChatSession:
    def __init__(self, policy, sampling: SamplingConfig | None = None, verifier: VerifierConfig | None = None,
                 prompt_format: str = "auto", model_name: str = "", trained: bool = False,
                 stop: list[str] | None = None):
        """prompt_format: `auto` (chat template when the tokenizer has one, else plain), `chat`, `plain`, `raw`.
        trained: questions go through `prompt_text` as the training run posed tasks; stop: extra stop strings."""
        self.policy = policy
        self.sampling = sampling or SamplingConfig()
        self.verifier_cfg = verifier or VerifierConfig(workers=1)
        self.model_name = model_name or str(policy.config.path)
        has_template = bool(getattr(policy.tokenizer, "chat_template", None))
        if prompt_format not in ("auto", "chat", "plain", "raw"):
            raise CodechatError(f"prompt format '{prompt_format}': expected auto, chat, plain or raw")
        if prompt_format == "chat" and not has_template:
            raise CodechatError(f"{self.model_name}: the tokenizer has no chat template; use --format plain")
        self.prompt_format = "chat" if prompt_format == "chat" or (prompt_format == "auto" and has_template) \
            else "raw" if prompt_format == "raw" else "plain"
        self.trained = trained
        self.stop = list(stop or [])
        self.turns: list[Turn] = []
        self.answers = 0
        """Answers generated so far (answer i is sampled with seed + i)."""
        self.done = False
        """Set by /quit."""
        self.cancel = threading.Event()
        """Set it (from another thread) to stop the answer being generated."""
        self._decoder = None
        self._verifier = None
        self._runner: ThreadPoolExecutor | None = None
        self._id = time.strftime("%Y%m%d-%H%M%S")

    # --- prompts and generation ---------------------------------------------------------------------------------
    def prompt_ids(self, turns: list[Turn]) -> list[int]:
        """Token ids of the conversation `turns`, the last one's answer still to come."""
        tok = self.policy.tokenizer
        pose = prompt_text_of if self.trained or self.prompt_format == "raw" else (lambda q: q)
        if self.prompt_format == "raw":  # what training continued: prompt_text(task), no markers
            text = "".join(f"{pose(t.question)}{t.answer.strip()}\n" for t in turns[:-1]) + pose(turns[-1].question)
            return list(tok(text, add_special_tokens=True)["input_ids"])
        if self.prompt_format == "chat":
            messages = []
            for t in turns[:-1]:
                messages += [{"role": "user", "content": pose(t.question)}, {"role": "assistant", "content": t.answer}]
            messages.append({"role": "user", "content": pose(turns[-1].question)})
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):  # BatchEncoding in transformers 5
                ids = ids["input_ids"]
            return list(ids)
        text = "".join(f"User: {t.question}\nAssistant: {t.answer.strip()}\n" for t in turns[:-1])
        return list(tok(text + f"User: {turns[-1].question}\nAssistant:", add_special_tokens=True)["input_ids"])

    def context_limit(self) -> int:
        return int(getattr(unwrap(self.policy.model).config, "max_position_embeddings", 0) or 1 << 30)

    def fit_prompt(self) -> tuple[list[int], int]:
        """The prompt for the last turn, leaving out the oldest turns if needed; and the tokens left to generate."""
        limit = self.context_limit()
        for start in range(len(self.turns)):
            ids = self.prompt_ids(self.turns[start:])
            if len(ids) < limit:
                return ids, min(self.sampling.max_new_tokens, limit - len(ids))
        raise CodechatError(f"the question is too long for the model's context ({limit} tokens)")

    def ask(self, question: str) -> Iterator[str]:
        """Stream the answer to `question` as text pieces; the turn is in `turns` (partial if stopped early)."""
        validate(self.sampling)
        turn = Turn(question)
        self.turns.append(turn)
        try:
            prompt, max_new = self.fit_prompt()
        except CodechatError:
            self.turns.pop()
            raise
        try:
            cfg = SamplingConfig(**{**self.sampling.__dict__, "max_new_tokens": max_new,
                                    "seed": self.sampling.seed + self.answers})
            self.answers += 1
            self.cancel.clear()
            turn.finish = yield from self._stream(prompt, cfg, turn)
        finally:
            turn.finish = turn.finish or "interrupted"

    def _stream(self, prompt: list[int], cfg: SamplingConfig, turn: Turn) -> Iterator[str]:
        """Text pieces as tokens arrive; returns the finish reason. Holds back an incomplete UTF-8 character and
        the start of a possible stop string until the next tokens decide."""
        stops = ([PLAIN_STOP] if self.prompt_format == "plain" else []) + self.stop
        eos = set(self.policy.eos_token_ids)
        ids: list[int] = []

        def emit(text: str, upto: int) -> str:
            if not text.startswith(turn.answer) or upto <= len(turn.answer):
                return ""
            piece, turn.answer = text[len(turn.answer):upto], text[:upto]
            return piece

        reason = "length"
        for tok in self.tokens(prompt, cfg):
            if tok in eos:
                reason = "stop"
                break
            ids.append(tok)
            text = self.policy.decode(ids)
            hit = min((text.find(s) for s in stops if s in text), default=-1)
            piece = emit(text, hit if hit >= 0 else len(text) - held_back(text, stops))
            if piece:
                yield piece
            if hit >= 0:
                return "stop"
            if self.cancel.is_set():
                return "interrupted"
        piece = emit(self.policy.decode(ids), 1 << 62)  # what was held back
        if piece:
            yield piece
        return reason

    def tokens(self, prompt: list[int], cfg: SamplingConfig) -> Iterator[int]:
        """New token ids, one at a time, until max_new_tokens (the caller stops at EOS)."""
        pol, dev = self.policy, self.policy.device
        if self._decoder is None:  # made once: the fused weights of the fast decoder are a copy
            self._decoder = make_decoder(pol.model)
        was_training = pol.model.training
        pol.model.eval()
        try:  # no_grad around each model call only: grad mode is global, and this generator yields to the caller
            ids = torch.tensor([prompt], dtype=torch.long, device=dev)  # (1, L)
            index = torch.zeros(1, dtype=torch.long, device=dev)
            with torch.no_grad():
                logits = self._decoder.prefill(ids, torch.ones_like(ids, dtype=torch.bool), index,
                                               cfg.max_new_tokens)  # (1, V)
            gen = torch.Generator(device=dev).manual_seed(cfg.seed)
            for t in range(cfg.max_new_tokens):
                u = torch.rand(2, generator=gen, device=dev)[:1]  # (1,) drawn as Sampler does for n=1
                tok, _ = choose(process_logits(logits, cfg), cfg, u)  # (1,)
                yield int(tok[0])
                if t + 1 < cfg.max_new_tokens:
                    with torch.no_grad():
                        logits = self._decoder.step(tok)
        finally:
            pol.model.train(was_training)

    # --- sandbox ------------------------------------------------------------------------------------------------
    @property
    def verifier(self):
        if self._verifier is None:
            self._verifier = Verifier(self.verifier_cfg)
        return self._verifier

    def sandboxed(self, fn, *args):
        """fn(*args) on a helper thread, so Ctrl-C returns to the prompt at once: the job itself ends by its time
        limit in the background, and the next one waits for it (one at a time, never a stale reply)."""
        if self._runner is None:
            self._runner = ThreadPoolExecutor(1, thread_name_prefix="codechat-chat-sandbox")
        return self._runner.submit(fn, *args).result()

    def close(self) -> None:
        """Wait for a sandbox job still running, then stop the sandbox workers (they restart when needed)."""
        if self._runner is not None:
            self._runner.shutdown(wait=True)
            self._runner = None
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None

    def last_answer(self) -> Turn:
        answered = [t for t in self.turns if t.answer.strip()]
        if not answered:
            raise CodechatError("no answer yet: ask a question first")
        return answered[-1]

    def run_last(self) -> RunReport:
        """Run the last code block of the last answer, as a script, in the verifier's sandbox."""
        code = extract_code(self.last_answer().answer, Task("chat", "", []))
        if code is None:
            return RunReport("no_code", message="the last answer holds no code")
        return self.sandboxed(run_program, self.verifier, code, self.verifier_cfg.timeout_s)

    def test(self, text: str) -> list[AssertResult]:
        """Run each assert in `text` against the last answer (the code the verifier would pick) on its own."""
        turn = self.last_answer()
        io = parse_io_tests(text)
        if io is not None:  # input:/output: pairs: run the answer as a stdin/stdout program (chat/stdio_test.py)
            return self.sandboxed(check_io, self.verifier, turn.question, turn.answer, io)
        tests, setup = split_tests(text)
        turn.tests += [t for t in tests if t not in turn.tests]
        turn.setup = "\n".join(s for s in (turn.setup, setup) if s and s not in turn.setup)
        turn.entry_point = turn.entry_point or guess_entry_point(turn.tests, turn.answer)
        results = self.sandboxed(check_asserts, self.verifier, turn.question, turn.answer, tests, turn.setup,
                                 turn.entry_point)
        turn.results = [r for r in turn.results if r.test not in tests] + results
        return results

    # --- conversation files -------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> int:
        """Write one task per answered turn (our JSONL schema); returns how many. See docs/chat.md."""
        turns = [t for t in self.turns if t.finish]
        if not turns:
            raise CodechatError("/save: nothing to save yet")
        tasks = []
        for i, t in enumerate(turns, 1):
            status = {r.test: r.verdict.status for r in t.results}
            meta = {"answer": t.answer, "turn": i, "finish": t.finish, "model": self.model_name,
                    "test_status": [status.get(x, "not_run") for x in t.tests]}
            if t.tests and all(s == "passed" for s in meta["test_status"]):
                meta["solution"] = extract_code(t.answer, Task("chat", t.question, t.tests, t.entry_point))
            tasks.append(Task(f"chat-{self._id}-{i}", t.question, list(t.tests), t.entry_point, t.setup,
                              None, meta))
        try:
            save_tasks(tasks, path)
        except OSError as e:
            raise CodechatError(f"{path}: cannot write ({e.strerror or e})") from None
        return len(tasks)

    def load(self, path: str | Path) -> int:
        """Replace the conversation with one saved by `save` (answers from metadata.answer); returns its turns."""
        tasks = load_tasks(path)
        turns = []
        for t in tasks:
            if "answer" not in t.metadata:
                raise CodechatError(f"{path}: task {t.task_id} has no metadata.answer (not a saved chat)")
            turns.append(Turn(t.prompt, str(t.metadata["answer"]), t.metadata.get("finish") or "stop",
                              list(t.tests), t.setup, t.entry_point))
        self.turns = turns
        return len(turns)

    # --- slash commands (chat/slash.py) ----------------------------------------------------------------------
    def handle(self, line: str, read_line: Callable[[str], str] | None = None) -> str:
        """Run one slash command; returns the text to show. `read_line(prompt)` reads more input (for /test)."""
        return slash.handle(self, line, read_line)


def held_back(text: str, stops: list[str]) -> int:
    """Characters at the end of `text` not to show yet: an incomplete UTF-8 character, or a prefix of a stop."""
    n = 1 if text.endswith("\ufffd") else 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                n = max(n, k)
                break
    return n


"""The slash commands of a chat session: one line of input (`/set top_p 0.9`, `/run`, `/save chat.jsonl`) to the
text to show, through the session's own operations (chat/session.py).

    reply = handle(session, "/test assert add(1, 2) == 3")          # = ChatSession.handle(line)

Each command is a function `(session, args, rest, read_line) -> str` in COMMANDS; a user mistake (unknown
command or setting, a value of the wrong type or range, missing file name) is one CodechatError line.
"""
from __future__ import annotations

import math
import shlex
from typing import Callable

from codechat import CodechatError
from codechat.chat.run import why
from codechat.config import SamplingConfig
from codechat.policy.sampler import validate

SETTINGS = {  # /set NAME -> (where, type); names also accept dashes (max-new-tokens)
    "temperature": ("sampling", float), "top_p": ("sampling", float), "top_k": ("sampling", int),
    "max_new_tokens": ("sampling", int), "seed": ("sampling", int), "timeout": ("sandbox", float),
}
HELP = """commands:
  /set [NAME VALUE]  show or change a setting: temperature, top_p, top_k, max_new_tokens, seed, timeout (s)
  /run               run the last code block of the last answer in the sandbox: stdout, stderr, status, time
  /test [ASSERT]     paste asserts (end with an empty line); reports which pass against the last answer;
                     or 'input:' / 'output:' blocks to run it as a stdin/stdout program
  /save FILE         write the conversation as JSONL tasks (question + your asserts), loadable as a task file
  /load FILE         continue a conversation saved with /save
  /reset             forget the conversation
  /help              this text
  /quit              leave (or Ctrl-D); Ctrl-C stops an answer without leaving"""

ReadLine = Callable[[str], str]


def handle(session, line: str, read_line: ReadLine | None = None) -> str:
    """Run one slash command on `session`; returns the text to show. `read_line(prompt)` reads more input."""
    word, _, rest = line.strip().partition(" ")
    cmd, rest = word.lower(), rest.strip()
    if cmd not in COMMANDS:
        raise CodechatError(f"unknown command '{word}' (/help lists the commands)")
    try:
        args = shlex.split(rest) if cmd != "/test" else []
    except ValueError as e:
        raise CodechatError(f"{word}: {e}") from None
    return COMMANDS[cmd](session, args, rest, read_line)


def _quit(session, args, rest, read_line) -> str:
    session.done = True
    return ""


def _test(session, args, rest, read_line) -> str:
    text = rest
    if not text:
        if read_line is None:
            raise CodechatError("/test: give the asserts on the line, e.g. /test assert f(1) == 2")
        text = "\n".join(iter(lambda: read_line("... "), ""))
    results = session.test(text)
    lines = [f"PASS  {r.test}" if r.verdict.passed else f"FAIL  {r.test}    [{why(r.verdict)}]" for r in results]
    return "\n".join(lines + [f"{sum(r.verdict.passed for r in results)}/{len(results)} passed"])


def _one_file(cmd: str, args: list[str]) -> str:
    if len(args) != 1:
        raise CodechatError(f"{cmd}: give one file name, e.g. {cmd} chat.jsonl")
    return args[0]


def _save(session, args, rest, read_line) -> str:
    path = _one_file("/save", args)
    return f"saved {session.save(path)} turn(s) to {path}"


def _load(session, args, rest, read_line) -> str:
    path = _one_file("/load", args)
    return f"loaded {session.load(path)} turn(s) from {path}"


def _reset(session, args, rest, read_line) -> str:
    session.turns = []
    return "conversation cleared"


def set_setting(session, *args: str) -> str:
    """`/set` shows the settings; `/set NAME VALUE` changes one (validated before it takes effect)."""
    if not args:
        return "  ".join(f"{k}={setting(session, k)}" for k in SETTINGS)
    if len(args) != 2:
        raise CodechatError("/set: expected NAME VALUE, e.g. /set temperature 0.2")
    name = args[0].lower().replace("-", "_")
    if name not in SETTINGS:
        raise CodechatError(f"/set: unknown setting '{args[0]}' (valid: {', '.join(SETTINGS)})")
    where, tp = SETTINGS[name]
    try:
        value = tp(args[1])
    except ValueError:
        raise CodechatError(f"/set {name}: expected a{'n integer' if tp is int else ' number'}, "
                            f"got '{args[1]}'") from None
    if tp is float and not math.isfinite(value):
        raise CodechatError(f"/set {name}: expected a finite number, got '{args[1]}'")
    if where == "sandbox":
        if not value > 0:
            raise CodechatError(f"/set timeout: expected a positive number of seconds, got {args[1]}")
        session.verifier_cfg.timeout_s = value
    else:
        new = SamplingConfig(**{**session.sampling.__dict__, name: value})
        validate(new)
        session.sampling = new
    return f"{name} = {value}"


def setting(session, name: str):
    """The current value of setting `name` (a key of SETTINGS)."""
    return session.verifier_cfg.timeout_s if name == "timeout" else getattr(session.sampling, name)


COMMANDS: dict[str, Callable[..., str]] = {
    "/quit": _quit, "/exit": _quit, "/q": _quit,
    "/help": lambda session, args, rest, read_line: HELP, "/?": lambda session, args, rest, read_line: HELP,
    "/set": lambda session, args, rest, read_line: set_setting(session, *args),
    "/run": lambda session, args, rest, read_line: session.run_last().render(),
    "/test": _test, "/save": _save, "/load": _load, "/reset": _reset,
}
"""Command word (lower-cased) -> function(session, args, rest, read_line); `args` is `rest` split as a shell
would (empty for /test, which takes the text as it is)."""

"""Thinking blocks: split a completion into its thinking and its answer, before any code or answer is extracted.

    split_thinking("<think>plan</think>def f(): ...", cfg) -> ThinkSplit(thinking="plan", answer="def f(): ...")

Grammar (open/close are ThinkingConfig.open/close, e.g. `<think>` / `</think>`):
    completion := (text [thinking close] | open thinking close | open thinking EOF)*
- every `open ... close` block is thinking and removed from the answer;
- an `open` never closed makes the rest of the completion thinking (a sample cut off while thinking has no
  answer: code written inside a thinking block is never run);
- a `close` outside a block makes the text before it thinking, back to the previous block's end or the start:
  chat templates that put the open tag in the prompt, and `<think></think>plan</think>code`, a plan written after
  a (forced) empty block, which is thinking too (else it would earn the no-think bonus).
A completion is in mode `nothink` when its thinking is empty or blank (an empty block `<think></think>` or
none at all), else `think`. Simplified: tags are matched as plain strings, not as tokens; nested tags are not
counted (the first close ends the block).
"""
from __future__ import annotations

from dataclasses import dataclass

from codechat import CodechatError
from codechat.config import ThinkingConfig


@dataclass(frozen=True)
class ThinkSplit:
    thinking: str
    """The text of all thinking blocks, joined by newlines (empty when none)."""
    answer: str
    """The completion without its thinking blocks: what the verifier extracts code or answers from."""

    @property
    def thought(self) -> bool:
        """True when the completion thought (non-blank thinking): mode `think`; False: mode `nothink`."""
        return bool(self.thinking.strip())


def check_tags(cfg: ThinkingConfig) -> None:
    if cfg.enabled and (not cfg.open or not cfg.close or cfg.open == cfg.close):
        raise CodechatError(f"verifier.thinking: open and close must be two different non-empty tags, "
                            f"got open={cfg.open!r} close={cfg.close!r}")


def split_thinking(completion: str, cfg: ThinkingConfig) -> ThinkSplit:
    """-> ThinkSplit; with thinking off the whole completion is the answer."""
    if not cfg.enabled:
        return ThinkSplit("", completion)
    check_tags(cfg)
    op, cl = cfg.open, cfg.close
    thinking, answer = [], []
    rest = completion

    def outside(text: str) -> None:  # text outside blocks: up to its last (stray) close tag, thinking
        k = text.rfind(cl)
        if k >= 0:
            thinking.append(text[:k])
            text = text[k + len(cl):]
        answer.append(text)

    while rest:
        i = rest.find(op)
        if i < 0:
            outside(rest)
            break
        outside(rest[:i])
        rest = rest[i + len(op):]
        j = rest.find(cl)
        if j < 0:  # never closed: the rest is thinking
            thinking.append(rest)
            break
        thinking.append(rest[:j])
        rest = rest[j + len(cl):]
    return ThinkSplit("\n".join(thinking), "".join(answer))

"""What a problem statement says about judging its output, for public stdin/stdout sets whose records carry no
checker and no tolerance field (Codeforces, CodeContests, DeepCoder, LiveCodeBench):

- "print YES/NO in any case"  -> words compare case-insensitively;
- "absolute or relative error does not exceed 10^{-k}"  -> decimal tokens within 10^-k;
- "if there are several answers, print any of them"  -> the answer is not unique: comparing output with one
  expected answer misjudges correct programs, so such a task is flagged (`multiple_answers`) and, without a
  checker, left out of training by default (`data.multiple_answers`).

Simplified: English statements, matched by phrase; a statement worded otherwise is judged by the default rule.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_CASE = re.compile(r"\bin any (letter )?case\b|\bany register\b|\bcase[- ]insensitive\b|"
                   r"\b(?:yes|no)\b[^.]{0,120}\b(?:recogni[sz]ed|accepted) as (?:a )?(?:positive|negative)", re.I)
_ERROR = re.compile(r"(?:absolute|relative)\s+(?:or\s+(?:absolute|relative)\s+)?error[^.]{0,160}?"
                    r"(?:10\s*\^\s*\{?\s*[-−]\s*(\d{1,2})|1\s*[eE]\s*[-−]\s*(\d{1,2})|0\.(0{0,15})1\b)", re.I | re.S)
_ANY = re.compile(r"(?:print|output|find) any(?: one)? of them|\bany (?:valid|correct|possible|suitable|optimal) "
                  r"(?:answer|solution)|(?:print|output) any (?:such|one|string|array|permutation|sequence|"
                  r"matrix|tree|graph|pair|set|of)\b|any of (?:the|them|possible) (?:answers|solutions)|"
                  r"if there are (?:several|multiple|many)[^.]{0,80}(?:print|output|choose) any", re.I | re.S)


@dataclass(frozen=True)
class StatementRules:
    ignore_case: bool = False
    """Words in the output compare case-insensitively."""
    float_tol: float = 0.0
    """> 0: the tolerance the statement states for decimal answers."""
    multiple_answers: bool = False
    """The statement accepts any of several answers."""


def not_unique(task) -> bool:
    """A stdin/stdout task whose statement accepts any of several answers and that has no checker to judge them."""
    return bool(task.metadata.get("multiple_answers")) and task.stdio is not None and not task.stdio.checker


def statement_rules(statement: str) -> StatementRules:
    text = statement[:200_000]  # statements are short; a bound keeps the scan linear in what we read
    m = _ERROR.search(text)
    tol = 0.0
    if m:
        k = int(m.group(1) or m.group(2)) if (m.group(1) or m.group(2)) else len(m.group(3)) + 1
        tol = 10.0 ** -k
    return StatementRules(bool(_CASE.search(text)), tol, bool(_ANY.search(text)))

"""Answer tasks (`Task.kind == "answer"`): a question and a reference final answer, judged by comparing answers
(codechat/verifier/answer.py), not by running code. Loaders for three formats, detected from the fields:

    gsm8k   {"question", "answer": "...rationale...\\n#### 18"}             (openai/grade-school-math)
    math    {"problem", "solution": "... \\boxed{2} ..."} or {"problem", "answer"}   (MATH, MATH-500; `unique_id`,
            `idx`, `level`, `type`, `subject` kept in metadata)
    answer  {"task_id", "prompt", "answer", "accepted"?: [...], "solution"?, "metadata"?}   (our JSONL)

GSM8K and MATH prompts get ANSWER_INSTRUCTION appended (the convention the `format` reward checks); their
reference solutions (GSM8K's calculator annotations `<<2*3=6>>` removed) end in `\\boxed{ANSWER}` for SFT.
Also `extract_boxed`, the balanced-brace reader of `\\boxed{...}` that the verifier's extractor shares.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from codechat.tasks.model import Task, TaskFormatError

KIND = "answer"
ANSWER_INSTRUCTION = "Give the final answer as \\boxed{ANSWER}."
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_CALC = re.compile(r"<<[^<>\n]*>>")
_HASHES = re.compile(r"\n?[ \t]*####[ \t]*([^\n]*)\s*$")


def _balanced(text: str, start: int, max_chars: int) -> str | None:
    """The content of the brace group opening at text[start] == '{', or None if unbalanced within max_chars."""
    depth, end = 0, min(len(text), start + max_chars + 2)
    for i in range(start, end):
        c = text[i]
        if c == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif c == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return None


def extract_boxed(text: str, max_chars: int = 512) -> str | None:
    """The content of the last balanced \\boxed{...} (or \\fbox{...}, or `\\boxed 5`); None when there is none."""
    matches = list(_BOXED.finditer(text))
    for m in reversed(matches[-64:]):  # bounded: many broken `\boxed{` cannot cost quadratic time
        j = m.end()
        if j < len(text) and text[j] == "{":
            inner = _balanced(text, j, max_chars)
            if inner is not None:
                return inner
        elif j < len(text) and m.end() > m.start() + len(m.group().rstrip()):  # `\boxed 5`: the next token
            token = re.match(r"[^\s$.,;]+", text[j:j + max_chars])
            if token:
                return token.group()
    return None


def answer_task(task_id: str, prompt: str, answer: str, accepted: list[str] | None = None,
                solution: str | None = None, **metadata: Any) -> Task:
    """An answer task; `answer` and `accepted` go to metadata, where the verifier reads them."""
    meta = {"answer": answer, "accepted": list(accepted or []), **metadata}
    if solution:
        meta["solution"] = solution
    return Task(task_id, prompt, [], None, metadata=meta, kind=KIND)


def detect(rec: dict[str, Any]) -> str | None:
    """The answer format of a record, from its fields (a GSM8K answer must contain `####`), or None."""
    keys = set(rec)
    if {"question", "answer"} <= keys and isinstance(rec["answer"], str) and "####" in rec["answer"]:
        return "gsm8k"
    if "problem" in keys and ("solution" in keys or "answer" in keys):
        return "math"
    if {"prompt", "answer"} <= keys and "tests" not in keys:
        return "answer"
    return None


def _line(where: str) -> str:
    return where.rsplit(":", 1)[-1]


def _text(rec: dict, name: str, where: str) -> str:
    if name not in rec:
        raise TaskFormatError(f"{where}: missing required field '{name}'")
    value = rec[name]
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise TaskFormatError(f"{where}: field '{name}' must be a string, got {type(value).__name__}")
    return str(value)


def _from_gsm8k(rec: dict, where: str) -> Task:
    question, full = _text(rec, "question", where), _text(rec, "answer", where)
    m = _HASHES.search(full)
    if m is None or not m.group(1).strip():
        raise TaskFormatError(f"{where}: field 'answer' does not end in '#### ANSWER'")
    final = m.group(1).strip()
    rationale = _CALC.sub("", full[:m.start()]).strip()
    tid = str(rec.get("task_id") or rec.get("id") or f"gsm8k/{_line(where)}")
    return answer_task(tid, f"{question.strip()}\n{ANSWER_INSTRUCTION}", final,
                       solution=f"{rationale}\nThe answer is \\boxed{{{final}}}.", question=question)


def _from_math(rec: dict, where: str) -> Task:
    problem = _text(rec, "problem", where)
    solution = _text(rec, "solution", where) if "solution" in rec else None
    if "answer" in rec:
        final = _text(rec, "answer", where)
    else:
        final = extract_boxed(solution or "", max_chars=4096)
        if final is None:
            raise TaskFormatError(f"{where}: field 'solution' has no \\boxed{{...}} answer and there is no 'answer'")
    if not final.strip():
        raise TaskFormatError(f"{where}: empty answer")
    ident = rec.get("unique_id") or rec.get("task_id") or (f"math/{rec['idx']}" if "idx" in rec else None)
    meta = {k: rec[k] for k in ("level", "type", "subject") if k in rec}
    if solution and extract_boxed(solution, 4096) is None:
        solution = f"{solution.strip()}\nThe answer is \\boxed{{{final}}}."
    return answer_task(str(ident or f"math/{_line(where)}"), f"{problem.strip()}\n{ANSWER_INSTRUCTION}", final,
                       solution=solution, question=problem, **meta)


def _from_answer(rec: dict, where: str) -> Task:
    tid, prompt, final = _text(rec, "task_id", where), _text(rec, "prompt", where), _text(rec, "answer", where)
    if not final.strip():
        raise TaskFormatError(f"{where}: empty answer")
    accepted = rec.get("accepted") or []
    if isinstance(accepted, str):
        accepted = [accepted]
    if not isinstance(accepted, list) or not all(isinstance(a, (str, int, float)) for a in accepted):
        raise TaskFormatError(f"{where}: field 'accepted' must be a list of strings")
    meta = rec.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise TaskFormatError(f"{where}: field 'metadata' must be an object")
    solution = rec.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise TaskFormatError(f"{where}: field 'solution' must be a string")
    meta = {k: v for k, v in meta.items() if k not in ("answer", "accepted", "solution")}
    return answer_task(tid, prompt, final, [str(a) for a in accepted], solution, **meta)


LOADERS: dict[str, Callable[[dict, str], Task]] = {"gsm8k": _from_gsm8k, "math": _from_math, "answer": _from_answer}


def to_record(t: Task) -> dict[str, Any]:
    """An answer task in our `answer` JSONL schema (what save_tasks writes for it)."""
    meta = {k: v for k, v in t.metadata.items() if k not in ("answer", "accepted", "solution", "source")}
    rec = {"task_id": t.task_id, "prompt": t.prompt, "answer": t.metadata.get("answer", ""),
           "accepted": list(t.metadata.get("accepted") or [])}
    if t.metadata.get("solution"):
        rec["solution"] = t.metadata["solution"]
    rec["metadata"] = meta
    return rec

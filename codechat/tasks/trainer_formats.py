"""Task data as other trainers keep it: Parquet files, Hugging Face `datasets` directories, verl's RL records and
TRL-style prompt/test rows. No plugin needed: `data.train: data/code-r1/train.parquet` trains.

Files (`read_table`): a `.parquet` file, or a directory written by `datasets`' `save_to_disk` (its Arrow files,
as listed in state.json; a DatasetDict directory names its splits: give one, `DIR/train`). Rows become the same
records a JSONL line would, so every format codechat reads may also come as Parquet. Needs pyarrow
(`pip install 'codechat[data]'`; `datasets` itself is not needed).

Record shapes (detected by `detect_trainer_format`, after codechat's own formats):
- `verl`: verl's RL records, as its data_preprocess scripts write them: `prompt` a list of chat messages,
  `reward_model.ground_truth` one of: JSON `{"functional": TEST_CODE}` (a script run after the program: code-r1's
  LeetCode rows), JSON `{"inputs": [...], "outputs": [...]}` (stdin/stdout tests, or call-based ones with
  `fn_name`: APPS, TACO, PRIME), or a plain answer (math rows, judged as answer tasks); `extra_info.index` is the
  task id and `extra_info.reference` (or `solution`) the reference.
- `trl`: a `prompt` (text or chat messages) with its tests in the row, as TRL reward functions receive them:
  `tests` / `test_list` (assert strings) or `test` (a script), optional `entry_point`, `setup`, `solution` /
  `completion`; or Open-R1's `verification_info.test_cases` of stdin/stdout pairs.
A chat prompt poses its user turns' text; its system turn is not a task's: codechat warns and uses
`model.system_prompt` (set it to the dataset's system prompt to keep it).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from codechat.tasks.answer import answer_task
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.stdio_loaders import from_apps

SYSTEM_TURN = "system_turn"
"""Task metadata key: the system turn of the record's chat prompt (not posed; `model.system_prompt` is)."""


def is_table(path: Path) -> bool:
    """A Parquet file or a `datasets` save_to_disk directory (a Dataset or a DatasetDict)."""
    p = Path(path)
    return (p.is_file() and p.suffix == ".parquet") or (p.is_dir() and ((p / "state.json").is_file()
                                                                       or (p / "dataset_dict.json").is_file()))


def _pyarrow():
    try:
        import pyarrow  # pyarrow: optional dependency (the data extra), imported on use
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise TaskFormatError("Parquet files and datasets directories need pyarrow: pip install 'codechat[data]'") \
            from None
    return pyarrow


def read_table(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(row number, record) pairs of a Parquet file or a save_to_disk directory (module docstring)."""
    pa, p = _pyarrow(), Path(path)
    try:
        if p.is_file():
            rows = pa.parquet.read_table(p).to_pylist()
        elif (p / "dataset_dict.json").is_file():
            splits = json.loads((p / "dataset_dict.json").read_text()).get("splits") or []
            raise TaskFormatError(f"{p}: a datasets DatasetDict with splits {', '.join(map(str, splits))}: give one "
                                  f"split's directory, e.g. {p / (splits[0] if splits else 'train')}")
        else:
            files = [f["filename"] for f in json.loads((p / "state.json").read_text()).get("_data_files") or []]
            if not files or any("/" in f or "\\" in f or f.startswith(".") for f in files):
                raise TaskFormatError(f"{p}/state.json: no data files listed (or a name outside the directory)")
            rows = []
            for f in files:
                with pa.ipc.open_stream(str(p / f)) as reader:
                    rows += reader.read_all().to_pylist()
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
        raise TaskFormatError(f"{p}: cannot read the table ({str(e).splitlines()[0][:200]})") from None
    if not rows:
        raise TaskFormatError(f"{p}: empty table, no tasks")
    # a null is a column other rows have: absent here, as a JSONL record without the field (format detection)
    return [(i, {k: v for k, v in r.items() if v is not None}) for i, r in enumerate(rows, 1)]


def detect_trainer_format(rec: dict[str, Any]) -> str | None:
    keys = set(rec)
    if {"prompt", "reward_model"} <= keys:
        return "verl"
    has_tests = bool(keys & {"tests", "test_list", "test", "verification_info"})
    if "prompt" in keys and has_tests and (isinstance(rec["prompt"], list) or "task_id" not in keys):
        return "trl"
    return None


def chat_prompt(prompt: Any, where: str) -> tuple[str, str]:
    """(the task text, the system turn or "") of a text prompt or a list of chat messages."""
    if isinstance(prompt, str):
        return prompt, ""
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                               for m in prompt):
        raise TaskFormatError(f"{where}: field 'prompt' must be a string or a list of chat messages "
                              "({role, content})")
    user = [m["content"] for m in prompt if m.get("role") == "user"]
    if not user:
        raise TaskFormatError(f"{where}: the chat prompt has no user turn")
    return "\n\n".join(user), "\n\n".join(m["content"] for m in prompt if m.get("role") == "system")


def _task_id(rec: dict, info: dict, prompt: str, where: str) -> str:
    for v in (rec.get("task_id"), rec.get("id"), info.get("index")):
        if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v):
            return str(v)
    return "row-" + hashlib.sha1(prompt.encode()).hexdigest()[:12]  # rows without ids: stable across runs


def _json_or_text(v: Any) -> Any:
    if isinstance(v, str) and v.lstrip().startswith("{"):
        try:
            return json.loads(v)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: the text itself
            return v
    return v


def from_verl(rec: dict, where: str) -> Task:
    prompt, system = chat_prompt(rec["prompt"], where)
    rm, info = rec.get("reward_model"), rec.get("extra_info")
    info = info if isinstance(info, dict) else {}
    gt = _json_or_text(rm.get("ground_truth")) if isinstance(rm, dict) else None
    if gt is None or gt == "":
        raise TaskFormatError(f"{where}: verl record without reward_model.ground_truth")
    tid = _task_id(rec, info, prompt, where)
    ref = next((info[k] for k in ("reference", "solution") if isinstance(info.get(k), str) and info[k].strip()), None)
    meta = {k: v for k, v in ((SYSTEM_TURN, system), ("data_source", rec.get("data_source"))) if v}
    if isinstance(gt, dict) and isinstance(gt.get("functional"), str):
        return Task(tid, prompt, [gt["functional"]], None, "", None, {**meta, **({"solution": ref} if ref else {})})
    if isinstance(gt, dict) and "inputs" in gt and "outputs" in gt:
        task = from_apps({"problem_id": tid, "question": prompt, "input_output": json.dumps(gt),
                          "solutions": json.dumps([ref] if ref else [])}, where)
        task.metadata.update(meta)
        return task
    if isinstance(gt, (str, int, float)) and not isinstance(gt, bool):
        return answer_task(tid, prompt, str(gt), [], ref, **meta)
    raise TaskFormatError(f"{where}: reward_model.ground_truth is none of {{functional}}, {{inputs, outputs}} or an "
                          f"answer: {str(gt)[:80]!r}")


def from_trl(rec: dict, where: str) -> Task:
    prompt, system = chat_prompt(rec["prompt"], where)
    tid = _task_id(rec, {}, prompt, where)
    meta: dict[str, Any] = {SYSTEM_TURN: system} if system else {}
    solution = next((rec[k] for k in ("solution", "completion", "canonical_solution")
                     if isinstance(rec.get(k), str) and rec[k].strip()), None)
    vi = _json_or_text(rec.get("verification_info"))
    if isinstance(vi, dict) and isinstance(vi.get("test_cases"), list):  # Open-R1: stdin/stdout pairs
        cases = [c for c in vi["test_cases"] if isinstance(c, dict)]
        io = {"inputs": [c.get("input") for c in cases], "outputs": [c.get("output") for c in cases]}
        task = from_apps({"problem_id": tid, "question": prompt, "input_output": json.dumps(io),
                          "solutions": json.dumps([solution] if solution else [])}, where)
        task.metadata.update(meta)
        return task
    tests = next((rec[k] for k in ("tests", "test_list", "test") if rec.get(k)), None)
    tests = [tests] if isinstance(tests, str) else tests
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise TaskFormatError(f"{where}: field 'tests' (or test_list, test) must be test code: a string or a list "
                              "of strings")
    if solution:
        meta["solution"] = solution
    entry = rec.get("entry_point") if isinstance(rec.get("entry_point"), str) else None
    setup = rec.get("setup") if isinstance(rec.get("setup"), str) else ""
    return Task(tid, prompt, list(tests), entry, setup, None, meta)


LOADERS = {"verl": from_verl, "trl": from_trl}

"""Data as trainers have it: Parquet files, `datasets` save_to_disk directories, verl's RL records (code-r1's
functional and stdin/stdout ground truths, math answers) and TRL-style prompt/test rows load without a plugin,
their references pass and wrong answers fail; a verl Parquet and a datasets directory train; model.system_prompt
reaches the chat template. Files are built here with pyarrow/datasets; the real LeetCodeDataset rows are
rewritten in verl's shape as verl's preprocessor writes them."""
import gzip
import json

import pytest

from codechat.config import ModelConfig, VerifierConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.tasks import TaskFormatError, load_tasks
from codechat.train import train
from codechat.train.checkpoint import Checkpointer
from codechat.verifier.factory import make_verifier

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

SYSTEM = "You are a helpful programming assistant."
ADD = "def add(a, b):\n    return a + b\n"


def verl_rows():
    """verl records as its data_preprocess scripts write them: chat prompt, reward_model, extra_info."""
    def row(i, gt, ref, user):
        return {"data_source": "code-r1", "ability": "coding",
                "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                "reward_model": {"style": "rule", "ground_truth": json.dumps(gt)},
                "extra_info": {"split": "train", "index": i, "reference": ref}}
    return [row(0, {"functional": "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"}, ADD, "Write add(a, b)."),
            row(1, {"inputs": ["1 2\n", "5 6\n"], "outputs": ["3\n", "11\n"]},
                "a, b = map(int, input().split())\nprint(a + b)\n", "Read a and b, print a + b."),
            row(2, {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [3, 7]}, ADD,
                "Write add(a, b) (call-based).")]


def write_parquet(rows, path):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def judge(tasks, answers):
    with make_verifier(VerifierConfig(workers=2)) as v:
        return [x.passed for x in v.verify_many(zip(tasks, answers))]


def test_verl_parquet_loads_and_its_references_pass(tmp_path):
    with pytest.warns(UserWarning, match="system turn"):
        tasks = load_tasks(write_parquet(verl_rows(), tmp_path / "train.parquet"))
    assert [t.task_id for t in tasks] == ["0", "1", "2"] and tasks[0].prompt == "Write add(a, b)."
    assert [t.kind for t in tasks] == ["function", "stdio", "function"]
    assert all(t.solution for t in tasks) and tasks[0].metadata["system_turn"] == SYSTEM
    wrong = ["def add(a, b):\n    return a - b\n", "print(0)\n", "def add(a, b):\n    return 3\n"]
    assert judge(tasks, [t.solution for t in tasks]) == [True, True, True]
    assert judge(tasks, wrong) == [False, False, False]


def test_verl_math_row_is_an_answer_task(tmp_path):
    row = {"data_source": "gsm8k", "prompt": [{"role": "user", "content": "2 + 3 = ?"}], "ability": "math",
           "reward_model": {"style": "rule", "ground_truth": "5"}, "extra_info": {"index": 7}}
    (t,) = load_tasks(write_parquet([row], tmp_path / "m.parquet"))
    assert t.kind == "answer" and t.metadata["answer"] == "5" and t.task_id == "7"


def test_trl_rows_load_from_a_datasets_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"prompt": [{"role": "user", "content": "Write add(a, b)."}], "test": "assert add(2, 2) == 4",
             "tests": None, "entry_point": None, "solution": ADD},
            {"prompt": [{"role": "user", "content": "Write mul(a, b)."}], "tests": ["assert mul(2, 3) == 6", "assert mul(0, 3) == 0"],
             "test": None, "entry_point": "mul", "solution": "def mul(a, b):\n    return a * b\n"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    tasks = load_tasks(tmp_path / "ds")
    assert [t.prompt for t in tasks] == ["Write add(a, b).", "Write mul(a, b)."]
    assert tasks[0].task_id.startswith("row-") and tasks[1].tests == rows[1]["tests"]
    assert judge(tasks, [t.solution for t in tasks]) == [True, True]
    assert judge(tasks, ["def add(a, b):\n    return 4\n", "def mul(a, b):\n    return a + b\n"]) == [True, False]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(TaskFormatError, match=r"DatasetDict with splits train: give one split's directory"):
        load_tasks(tmp_path / "dd")
    assert len(load_tasks(tmp_path / "dd" / "train")) == 2


def test_open_r1_verification_info_rows_are_stdio_tasks(tmp_path):
    vi = {"language": "python", "test_cases": [{"input": "4\n", "output": "16\n", "type": "stdin_stdout"}]}
    (t,) = load_tasks(write_parquet([{"prompt": "Square a number read from stdin.", "verification_info":
                                      json.dumps(vi)}], tmp_path / "o.parquet"))
    assert t.kind == "stdio"
    assert judge([t, t], ["print(int(input()) ** 2)\n", "print(int(input()) * 2)\n"]) == [True, False]


def test_bad_tables_fail_in_one_line(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(TaskFormatError, match="bad.parquet: cannot read the table") as e:
        load_tasks(tmp_path / "bad.parquet")
    assert "\n" not in str(e.value)
    row = {"prompt": [{"role": "system", "content": "x"}], "reward_model": {"ground_truth": "{}"}}
    with pytest.raises(TaskFormatError, match="no user turn"):
        load_tasks(write_parquet([row], tmp_path / "nouser.parquet"))


def test_real_leetcode_rows_in_verls_shape_pass(tmp_path, shared_data):
    """The LeetCodeDataset rows as verl's code-r1 preprocessor writes them ({"functional": test + check(entry)}),
    with the dataset's prelude, which verl's rows keep as extra_info.starter_code, as each reference's header."""
    path = shared_data / "leetcode" / "LeetCodeDataset-v0.2.0-train.jsonl.gz"
    recs = [json.loads(line) for line in gzip.open(path, "rt").read().splitlines()[:12]]
    rows = [{"data_source": "code-r1", "prompt": [{"role": "user", "content": r["query"]}], "ability": "coding",
             "reward_model": {"style": "rule", "ground_truth": json.dumps(
                 {"functional": f"{r['test']}\n\ncheck({r['entry_point'].strip()})\n"})},
             "extra_info": {"index": r["task_id"], "reference": r["prompt"] + "\n" + r["completion"]}} for r in recs]
    tasks = load_tasks(write_parquet(rows, tmp_path / "lc.parquet"))
    assert len(tasks) == 12
    assert judge(tasks, [t.solution for t in tasks]) == [True] * 12
    assert judge(tasks[:3], [""] * 3) == [False] * 3


@pytest.mark.slow
def test_a_verl_parquet_and_a_datasets_directory_train(tmp_path):
    datasets = pytest.importorskip("datasets")
    parquet = write_parquet(verl_rows(), tmp_path / "train.parquet")
    datasets.Dataset.from_list(verl_rows()).save_to_disk(str(tmp_path / "ds"))
    for name, data in (("parquet", parquet), ("ds", tmp_path / "ds")):
        run = tmp_path / f"run-{name}"
        train(load_config(None, [f"data.train={data}", "stages=[grpo]", "rl.steps=1", "rl.prompts_per_step=2",
                                 "rl.group_size=2", "sampling.max_new_tokens=8", "log.progress=false",
                                 "log.plot=false", "verifier.workers=1", f"run_dir={run}"]))
        assert Checkpointer(run).latest() is not None


def test_system_prompt_reaches_the_chat_template():
    from qwen_helpers import qwen_dir
    path = str(qwen_dir("qwen2.5"))
    plain = load_policy(ModelConfig(path=path, device="cpu", chat=True))
    sys_ = load_policy(ModelConfig(path=path, device="cpu", chat=True, system_prompt=SYSTEM))
    a, b = plain.tokenizer.decode(plain.encode_prompt("hi")), sys_.tokenizer.decode(sys_.encode_prompt("hi"))
    assert SYSTEM not in a and f"<|im_start|>system\n{SYSTEM}<|im_end|>" in b and b.endswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert load_config(None, [f"model.system_prompt={SYSTEM}"]).model.system_prompt == SYSTEM


def test_hostile_rows_fail_in_one_line_or_load_as_text(tmp_path):
    """A ground truth nested past the JSON parser's depth, a state.json naming a file outside its directory and
    a tests field of numbers: each one line naming the file."""
    deep = "{" + '"a":[' * 100_000 + "]" * 100_000 + "}"
    row = {"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": deep}}
    (t,) = load_tasks(write_parquet([row], tmp_path / "deep.parquet"))  # not JSON it can read: an answer
    assert t.kind == "answer"
    d = tmp_path / "ds"
    d.mkdir()
    (d / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../../etc/passwd"}]}))
    with pytest.raises(TaskFormatError, match="outside the directory"):
        load_tasks(d)
    with pytest.raises(TaskFormatError, match="must be test code") as e:
        load_tasks(write_parquet([{"prompt": "p", "tests": [1, 2]}], tmp_path / "n.parquet"))
    assert "\n" not in str(e.value)

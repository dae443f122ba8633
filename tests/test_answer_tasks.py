"""Answer tasks: GSM8K / MATH / our `answer` JSONL loaders (detected from the fields, one-line errors), save/load,
the generated `builtin:arith-*` family, and `A+B` mixed sets."""
import json
import re

import pytest

from codechat.config import AnswerConfig
from codechat.tasks import TaskFormatError, detect_format, load_tasks, load_tasks_with_format, save_tasks
from codechat.tasks.answer import ANSWER_INSTRUCTION, answer_task, extract_boxed
from codechat.tasks.arith import EASY_TEMPLATES, TEMPLATES, generate, split_of
from codechat.verifier.answer import AnswerChecker, references


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_gsm8k_from_shared_data(shared_data):
    tasks, fmt = load_tasks_with_format(shared_data / "math" / "gsm8k_test.jsonl")
    assert fmt == "gsm8k" and len(tasks) == 1319
    t = tasks[0]
    assert t.kind == "answer" and t.metadata["answer"] == "18" and t.tests == []
    assert t.prompt.endswith(ANSWER_INSTRUCTION) and "Janet" in t.prompt
    assert "<<" not in t.solution and t.solution.endswith("\\boxed{18}.")
    train = load_tasks(shared_data / "math" / "gsm8k_train.jsonl")
    assert len(train) == 7473 and len({t.task_id for t in train}) == 7473


def test_math_from_shared_data_answers_come_from_boxed(shared_data):
    tasks, fmt = load_tasks_with_format(shared_data / "math" / "math-test-4500.jsonl")
    assert fmt == "math" and len(tasks) == 4500
    assert tasks[0].metadata["answer"] == "2" and tasks[0].metadata["level"] == "Level 3"
    assert tasks[2].metadata["answer"] == "\\dfrac{9}{7}"  # nested braces inside \boxed{}
    assert all(t.metadata["answer"].strip() for t in tasks)


def test_gsm8k_references_verify_as_passed(shared_data):
    tasks = load_tasks(shared_data / "math" / "gsm8k_test.jsonl")[:200]
    with AnswerChecker(AnswerConfig(timeout_s=60)) as c:  # a loaded CI machine is slow, not wrong
        verdicts = c.check_many([(t, t.solution) for t in tasks])
    assert all(v.passed for v in verdicts), [v.message for v in verdicts if not v.passed][:3]


def test_math_references_verify_as_passed(shared_data):
    tasks = load_tasks(shared_data / "math" / "math-test-4500.jsonl")[:150]
    with AnswerChecker(AnswerConfig(timeout_s=60)) as c:  # a loaded CI machine is slow, not wrong
        verdicts = c.check_many([(t, t.solution) for t in tasks])
    rate = sum(v.passed for v in verdicts) / len(verdicts)
    assert rate == 1.0, [(t.task_id, v.message) for t, v in zip(tasks, verdicts) if not v.passed][:5]


def test_math500_shape_with_answer_field(tmp_path):
    p = write(tmp_path / "m500.jsonl", [{"problem": "What is $1+1$?", "solution": "It is 2.", "answer": "2",
                                         "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"}])
    (t,), fmt = load_tasks_with_format(p)
    assert fmt == "math" and t.task_id == "test/algebra/1.json" and t.metadata["answer"] == "2"
    assert t.solution.endswith("\\boxed{2}.") and t.metadata["subject"] == "Algebra"


def test_our_answer_jsonl_round_trip(tmp_path):
    p = write(tmp_path / "a.jsonl", [{"task_id": "half", "prompt": "Half of one?", "answer": "\\frac12",
                                      "accepted": ["one half"], "metadata": {"topic": "fractions"}}])
    tasks, fmt = load_tasks_with_format(p)
    assert fmt == "answer" and references(tasks[0]) == ["\\frac12", "one half"]
    save_tasks(tasks + [answer_task("two", "1+1?", "2", solution="\\boxed{2}")], tmp_path / "out.jsonl")
    again, fmt2 = load_tasks_with_format(tmp_path / "out.jsonl")
    assert fmt2 == "answer" and [t.to_dict() for t in again] == [t.to_dict() for t in tasks] + [
        again[1].to_dict()] and again[1].solution == "\\boxed{2}" and again[0].metadata["topic"] == "fractions"


def test_detection_keeps_code_formats():
    assert detect_format({"task_id": 1, "prompt": "p", "tests": ["assert 1"], "answer": "x"}) == "codechat"
    assert detect_format({"question": "q", "answer": "a\n#### 1"}) == "gsm8k"
    assert detect_format({"question": "q", "answer": 1}) is None  # not GSM8K-shaped: unknown
    assert detect_format({"problem": "p", "solution": "s"}) == "math"
    assert detect_format({"task_id": "t", "prompt": "p", "answer": "1"}) == "answer"


@pytest.mark.parametrize("row, needle", [
    ({"question": "q", "answer": "no hashes here"}, "does not end in '#### ANSWER'"),
    ({"question": "q", "answer": "x\n####   "}, "does not end in '#### ANSWER'"),
    ({"problem": "p", "solution": "no box"}, "no \\boxed{...} answer"),
    ({"problem": "p", "solution": "\\boxed{1}", "answer": ["1"]}, "field 'answer' must be a string"),
    ({"task_id": "t", "prompt": "p", "answer": ""}, "empty answer"),
    ({"task_id": "t", "prompt": "p", "answer": "1", "accepted": [["x"]]}, "'accepted' must be a list of strings"),
    ({"task_id": "t", "prompt": "p", "answer": "1", "metadata": []}, "'metadata' must be an object"),
])
def test_bad_records_fail_with_one_line_naming_file_and_line(tmp_path, row, needle):
    first = ({"question": "ok", "answer": "x\n#### 1"} if "question" in row else
             {"problem": "ok", "solution": "\\boxed{1}"} if "problem" in row else
             {"task_id": "a", "prompt": "p", "answer": "1"})
    p = write(tmp_path / "bad.jsonl", [first, row])
    with pytest.raises(TaskFormatError) as e:
        load_tasks(p)
    msg = str(e.value)
    assert needle in msg and f"{p}:2:" in msg and "\n" not in msg


def test_duplicate_answer_ids_are_refused(tmp_path):
    p = write(tmp_path / "d.jsonl", [{"task_id": "a", "prompt": "p", "answer": "1"}] * 2)
    with pytest.raises(TaskFormatError, match="duplicate task_id 'a'"):
        load_tasks(p)


def test_extract_boxed_nested_and_unbalanced():
    assert extract_boxed("so \\boxed{\\frac{1}{2}} and") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{1} then \\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    assert extract_boxed("\\boxed{2} then \\boxed{broken") == "2"
    assert extract_boxed("\\fbox{7}") == "7" and extract_boxed("\\boxed 5.") == "5"
    assert extract_boxed("no box") is None and extract_boxed("\\boxed{" * 10_000) is None


def test_arith_family_is_seeded_split_and_exact():
    a, b = generate("train", 300, seed=3), generate("train", 300, seed=3)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    held = generate("heldout", 100, seed=3)
    assert not {t.prompt for t in a} & {t.prompt for t in held}
    assert all(split_of(t.prompt.rsplit("\n", 1)[0]) == "heldout" for t in held)
    assert {t.metadata["template"] for t in a} == set(TEMPLATES)
    with AnswerChecker(AnswerConfig(workers=2, timeout_s=60)) as c:
        verdicts = c.check_many([(t, t.solution) for t in a + held])
        assert all(v.passed for v in verdicts)
        wrong = c.check_many([(t, "\\boxed{" + t.metadata["answer"] + " + 1}") for t in held])
        assert not any(v.passed for v in wrong)


def test_the_easy_level_is_split_exact_and_solved_by_its_rules():
    """`builtin:arith-easy-*`: every template in both sets, no shared question, every worked solution judged right,
    a wrong answer judged wrong, and each answer is what the template's rule makes of the question's numbers."""
    train, held = load_tasks("builtin:arith-easy-train"), load_tasks("builtin:arith-easy-heldout")
    assert (len(train), len(held)) == (2000, 200) and held[0].task_id == "arith-easy-heldout/0"
    assert {t.metadata["template"] for t in train} == {t.metadata["template"] for t in held[:100]} == set(EASY_TEMPLATES)
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    for t in train + held:
        nums = [int(n) for n in re.findall(r"\d+", t.prompt.split("\n")[0])]
        rule = {"place": sum(nums), "times-ten": nums[0] * 10, "next": nums[0] + 1, "largest": max(nums),
                "smallest": min(nums)}[t.metadata["template"]]
        assert t.metadata["answer"] == str(rule), t.prompt
    with AnswerChecker(AnswerConfig(workers=1, timeout_s=60)) as c:
        assert all(v.passed for v in c.check_many([(t, t.solution) for t in held]))
        assert not any(v.passed for v in c.check_many([(t, f"\\boxed{{{int(t.metadata['answer']) + 1}}}")
                                                       for t in held]))
    with pytest.raises(ValueError, match="unknown level 'hard'"):
        generate("train", 1, level="hard")


def test_builtin_names_and_mixed_sets():
    train = load_tasks("builtin:arith-train")
    assert len(train) == 1000 and train[0].metadata["source"] == "builtin:arith-train"
    mixed = load_tasks("builtin:toy+builtin:arith-heldout")
    kinds = {t.kind for t in mixed}
    assert kinds == {"function", "answer"} and len(mixed) == 10 + 200
    with pytest.raises(TaskFormatError, match="also in builtin:toy"):
        load_tasks("builtin:toy+builtin:toy")

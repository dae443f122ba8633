"""codechat/jsonl.py: the one JSONL reader of run files. Any bytes in a file give records or one CodechatError
naming the file and line, never another exception."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codechat import CodechatError
from codechat.jsonl import read_jsonl, read_records


def test_records_and_positions(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"a": 1}\n\n{"b": [2]}\n')
    assert list(read_jsonl(p)) == [(f"{p}:1", {"a": 1}), (f"{p}:3", {"b": [2]})]


@pytest.mark.parametrize("text,needle", [('{"a": 1}\n{oops\n', r"r.jsonl:2: invalid JSON in rollout file"),
                                         ('[1, 2]\n', r"r.jsonl:1: expected a JSON object in rollout file, got list")])
def test_bad_lines_name_file_and_line(tmp_path, text, needle):
    p = tmp_path / "r.jsonl"
    p.write_text(text)
    with pytest.raises(CodechatError, match=needle):
        read_records(p, "rollout file")


def test_missing_file(tmp_path):
    with pytest.raises(CodechatError, match="no such metrics file"):
        read_records(tmp_path / "none.jsonl", "metrics file")


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=30), st.dictionaries(st.text(max_size=5), st.integers()).map(json.dumps)),
                max_size=6))
def test_fuzz_any_lines_give_records_or_one_line_error(tmp_path, lines):
    p = tmp_path / "f.jsonl"
    p.write_text("\n".join(lines), encoding="utf-8")
    try:
        recs = read_records(p)
    except CodechatError as e:
        assert str(e).startswith(f"{p}:") and "\n" not in str(e)
    else:
        assert all(isinstance(r, dict) for r in recs)

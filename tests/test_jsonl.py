"""codechat/io/jsonl.py: the one JSONL reader of run files. Any bytes in a file give records or one CodechatError
naming the file and line, never another exception."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codechat import CodechatError
from codechat.io.jsonl import read_jsonl, read_records, scan_jsonl


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


def records_or_one_line_error(p) -> None:
    """read_records(p) gives dicts, or one CodechatError line that starts with the file's name."""
    try:
        recs = read_records(p)
    except CodechatError as e:
        assert str(e).startswith(f"{p}:") and "\n" not in str(e)
    else:
        assert all(isinstance(r, dict) for r in recs)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=30), st.dictionaries(st.text(max_size=5), st.integers()).map(json.dumps)),
                max_size=6))
def test_fuzz_any_lines_give_records_or_one_line_error(tmp_path, lines):
    p = tmp_path / "f.jsonl"
    p.write_text("\n".join(lines), encoding="utf-8")
    records_or_one_line_error(p)


BYTE_LINES = st.lists(st.one_of(st.binary(max_size=30), st.just(b"[" * 5000), st.just(b'{"a": "\xff"}'),
                                st.just(b'{"task_id": "t"}'), st.just(b"[1]")), max_size=6)
"""Lines of any bytes, and the hostile ones: nested past the recursion limit, not UTF-8, not an object."""


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(BYTE_LINES)
def test_fuzz_any_bytes_give_records_or_one_line_error(tmp_path, lines):
    """Not UTF-8, nested past the recursion limit, not an object: one CodechatError naming the line."""
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"\n".join(lines))
    records_or_one_line_error(p)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(BYTE_LINES)
def test_fuzz_scan_reports_every_bad_line_and_never_raises(tmp_path, lines):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"\n".join(lines))
    for lineno, rec, why in scan_jsonl(p):
        assert lineno >= 1
        assert (rec is None) == bool(why) and (rec is None or isinstance(rec, dict))
        assert why == "" or why.startswith("malformed line") and "\n" not in why


def test_scan_keeps_going_past_bad_lines(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"a": 1}\nnot json\n\n[1]\n' + b"[" * 5000 + b'\n{"b": "\xff"}\n')
    got = list(scan_jsonl(p))
    assert [(n, r) for n, r, _ in got] == [(1, {"a": 1}), (2, None), (4, None), (5, None), (6, {"b": "\ufffd"})]
    assert "got list" in got[2][2] and "nested too deeply" in got[3][2]
    with pytest.raises(CodechatError, match="none.jsonl: no such completions file"):
        list(scan_jsonl(tmp_path / "none.jsonl", "completions file"))


def test_not_utf8_run_file_names_the_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(CodechatError, match=r"m.jsonl:2: metrics file is not UTF-8 text"):
        read_records(p, "metrics file")

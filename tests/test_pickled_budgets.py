"""Attacks on the pickled test fields of LiveCodeBench-style records: small fields that cost unbounded work.

Each hostile field is refused quickly with a one-line error naming the field; its honest twin (the same shape,
within the budgets) loads.
"""
from __future__ import annotations

import base64
import json
import pickle
import time
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from codechat.tasks import TaskFormatError, load_tasks
from codechat.tasks.pickled import MAX_OPS, check_plain, decode_pickled_field, restricted_unpickle


def field(data: bytes, level: int = 9) -> str:
    return base64.b64encode(zlib.compress(data, level)).decode()


def doubled(depth: int) -> list:
    """A list holding the same list twice, `depth` levels deep: 2^depth values for anything that expands it."""
    x: list = ["x"]
    for _ in range(depth):
        x = [x, x]
    return x


def lcb_record(private: str) -> dict:
    return {"question_id": "q1", "question_content": "Print 1.", "public_test_cases": "[]",
            "private_test_cases": private, "starter_code": "", "metadata": "{}"}


def test_a_shared_list_sixty_deep_is_refused_in_a_moment_naming_the_field(tmp_path):
    data = pickle.dumps(doubled(60))
    assert len(data) < 400
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(lcb_record(field(data))) + "\n")
    t0 = time.monotonic()
    with pytest.raises(TaskFormatError, match=r"lcb.jsonl.*'private_test_cases'.*values") as e:
        load_tasks(path)
    assert time.monotonic() - t0 < 5 and "\n" not in str(e.value)


def test_the_same_shape_shallow_enough_loads():
    assert restricted_unpickle(pickle.dumps(doubled(10))) == doubled(10)


def repeats(n: int) -> bytes:
    """A pickle of a list holding one string n + 1 times: 2 bytes per entry (BINGET of the memoised string)."""
    return b"\x80\x04]\x94(\x8c\x01x\x94" + b"h\x01" * n + b"e."


def test_a_small_field_that_unpickles_into_millions_of_objects_is_refused_before_unpickling():
    text = field(repeats(MAX_OPS + 10))  # zlib folds the repeats into a few KiB
    assert len(text) < 40_000
    with pytest.raises(TaskFormatError, match="'test'.*opcodes"):
        decode_pickled_field(text, "f:1", "test")


def test_a_field_with_fewer_opcodes_than_the_limit_loads():
    assert decode_pickled_field(field(repeats(1000)), "f:1") == ["x"] * 1001


def test_a_zlib_bomb_is_refused_without_decompressing_it_all(monkeypatch):
    import codechat.tasks.pickled as p

    monkeypatch.setattr(p, "MAX_DECODED", 1 << 16)
    with pytest.raises(TaskFormatError, match="'private_test_cases' decompresses to more than"):
        decode_pickled_field(field(pickle.dumps("x" * (1 << 20))), "w", "private_test_cases")
    assert decode_pickled_field(field(pickle.dumps("x" * (1 << 15))), "w") == "x" * (1 << 15)


def test_a_list_that_holds_itself_is_refused():
    x: list = []
    x.append(x)
    with pytest.raises(TaskFormatError, match="holds itself"):
        decode_pickled_field(field(pickle.dumps(x)), "w")


def test_nesting_past_the_limit_is_refused_and_below_it_loads():
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(TaskFormatError, match="nested"):
        decode_pickled_field(field(pickle.dumps(deep)), "w")
    ok: list = []
    for _ in range(50):
        ok = [ok]
    assert decode_pickled_field(field(pickle.dumps(ok)), "w") == ok


def test_repeated_text_counts_every_time_it_is_referenced():
    s = "y" * 1000
    with pytest.raises(pickle.UnpicklingError, match="MiB"):
        check_plain([s] * 3000, max_bytes=1 << 20)
    check_plain([s] * 1000, max_bytes=1 << 20)


# --- fuzz: any bytes are loaded or refused with a one-line error, quickly --------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_pickle_bytes_load_or_fail_with_one_line(data):
    try:
        decode_pickled_field(field(data), "f:1", "private_test_cases")
    except TaskFormatError as e:
        assert "\n" not in str(e) and "f:1: field 'private_test_cases'" in str(e)


SHARED = st.recursive(st.none() | st.integers() | st.text(max_size=8),
                      lambda c: st.lists(c, max_size=3).map(lambda xs: xs + xs) | st.tuples(c, c), max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(SHARED)
def test_shared_values_load_exactly_as_pickled(x):
    assert restricted_unpickle(pickle.dumps(x)) == x

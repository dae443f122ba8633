"""The plain-data wire format: what survives the trip from the program to the judge, and what does not."""
import collections
import decimal
import fractions
import math

import pytest

from codechat.sandbox import frames, wire


@pytest.mark.parametrize("value", [
    None, True, 0, -7, 2**100, 1.5, "héllo", b"\x00\xff", bytearray(b"ab"), 3 + 4j, [1, [2, "x"]], (1, (2,)),
    {1: "a", (2, 3): [4]}, {1, 2}, frozenset({"a"}), collections.OrderedDict(a=1), collections.Counter("aab"),
    collections.deque([1, 2]), range(1, 9, 2), decimal.Decimal("1.10"), fractions.Fraction(1, 3), [],
])
def test_round_trip_keeps_value_and_type(value):
    back = wire.loads(wire.dumps(value))
    assert back == value and type(back) is type(value)


def test_nan_and_inf_round_trip():
    back = wire.loads(wire.dumps([math.nan, math.inf, -math.inf]))
    assert math.isnan(back[0]) and back[1:] == [math.inf, -math.inf]


def test_always_equal_subclass_arrives_as_plain_builtin():
    class I(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    back = wire.loads(wire.dumps(I(0)))
    assert type(back) is int and back != 5


def test_non_plain_object_becomes_handle_or_is_refused():
    class A:
        pass
    with pytest.raises(wire.WireError):
        wire.dumps(A())
    data = wire.dumps([A()], handle=lambda obj, depth: wire.handle_tag(42, obj))
    assert wire.loads(data, handle=lambda hid, tname: ("handle", hid, tname)) == [("handle", 42, "A")]


@pytest.mark.parametrize("raw", [b'{"$zz": 1}', b'{"$s": [[1]]}', b'{}', b'not json', b'{"$h": 1}'])
def test_malformed_data_is_refused(raw):
    with pytest.raises(wire.WireError):
        wire.loads(raw)


def test_too_deep_value_is_refused():
    x: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        x = [x]
    with pytest.raises(wire.WireError):
        wire.dumps(x)


def test_reader_keeps_frame_boundaries_across_reads():
    import os
    r, w = os.pipe()
    try:
        os.write(w, b"\x00\x00\x00\x02hi\x00\x00\x00\x03abc\x00\x00")  # two frames and half a header
        reader = frames.Reader(r)
        assert reader.recv() == b"hi" and reader.recv() == b"abc"
        os.write(w, b"\x00\x05" + b"x" * 5)
        assert reader.recv() == b"xxxxx"
        os.write(w, b"\x00\x00\x01\x00")
        with pytest.raises(wire.WireError):
            reader.recv(max_bytes=100)
    finally:
        os.close(r)
        os.close(w)


def test_too_deep_value_keeps_its_top_as_data_and_its_tail_as_a_handle():
    x: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        x = [x]
    data = wire.dumps(x, handle=lambda obj, depth: wire.handle_tag(7, obj))
    got, levels = wire.loads(data, handle=lambda hid, tname: ("handle", hid, tname)), 0
    while isinstance(got, list):
        got, levels = got[0], levels + 1
    assert got == ("handle", 7, "list") and levels == wire.MAX_DEPTH + 1

"""The `codechat train` config boundary (configio.py), fuzzed: any KEY=VALUE override and any config file give a
RunConfig or one ConfigError line naming the key (or the file), never a traceback. The values are the hostile
ones: wrong types, out of range, NaN and infinity as YAML and as strings, numbers too large for their type,
YAML too deep to parse, bad dates, unknown tags, unknown and over-deep keys."""
from __future__ import annotations

import dataclasses
import re
import typing

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from codechat.cli import main
from codechat.config import RunConfig
from codechat.config.io import RANGES, ConfigError, load_config


def leaves(cls=RunConfig, prefix: str = "") -> list[str]:
    """Every settable dotted key of RunConfig."""
    hints, out = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        out += leaves(tp, f"{prefix}{f.name}.") if dataclasses.is_dataclass(tp) else [prefix + f.name]
    return out


KEYS = leaves()
HOSTILE = ["nan", ".nan", "NaN", "inf", "-inf", ".inf", "-.inf", "1e400", "1.0e400", "-1.0e400", "9" * 5000,
           "-" + "9" * 60, "9" * 400, "2024-13-45", "2024-01-01", "!!float abc", "!!binary xx", "!!python/name:os.system",
           "[" * 3000, "[" * 3000 + "]" * 3000, "{a: " * 500, "[a, b", "{x: 1}", "[1, 2]", "[[[1]]]", "~", "null", "",
           "true", "-1", "0", "-0.5", "1.5", "1e-300", "\x00", "é\u2028", "'quoted", "a=b", "*alias", "&anchor x"]
VALUES = st.one_of(st.sampled_from(HOSTILE), st.integers(-10**30, 10**30).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=12))


def outcome(overrides: list[str]) -> str | None:
    """None when the config loads; the error line when it is refused (anything but a ConfigError fails)."""
    try:
        load_config(None, overrides)
    except ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg, f"{overrides}: not one line: {msg!r}"
        return msg
    return None


def names(msg: str, key: str, value: str) -> bool:
    """The message names the key: all of it, or its last part with its section, or (for a key under a mapping
    such as rewards.components.NAME) a part of it in quotes; or, for a name looked up in a registry (algo.loss,
    stages), the value in quotes with the valid names."""
    parts = key.split(".")
    return key in msg or re.search(rf"\b{re.escape(parts[-1])}\b", msg) is not None or ".".join(parts[-2:]) in msg or any(f"'{p}'" in msg for p in parts if p) \
        or "valid" in msg and any(f"'{v.strip()}'" in msg for v in value.strip("[]").split(",") if v.strip())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KEYS), VALUES)
@example("rl.zero_variance", "\x1f\n")  # a check quoting the raw value: the message still one line
def test_any_value_for_any_key_loads_or_is_one_line_naming_the_key(key, value):
    msg = outcome([f"{key}={value}"])
    assert msg is None or names(msg, key, value), f"{key}={value[:80]!r}: {msg}"


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text("abcxyz_.", min_size=1, max_size=12), min_size=1, max_size=40).map(".".join), VALUES)
def test_unknown_and_over_deep_keys_are_one_line(key, value):
    msg = outcome([f"{key}={value}"])
    if key not in KEYS:  # made-up keys: refused, never stored silently
        assert msg is not None, f"{key}={value!r} was accepted"


@pytest.mark.parametrize("value", ["nan", ".nan", "inf", ".inf", "-.inf", "1.0e400"])
@pytest.mark.parametrize("key", ["rl.lr", "sampling.temperature", "algo.kl_beta", "verifier.timeout_s"])
def test_floats_must_be_finite(key, value):
    """`.inf` passed every `>= 0` check: rl.lr=.inf trained to NaN weights, sampling.temperature=.inf sampled
    uniformly."""
    msg = outcome([f"{key}={value}"])
    assert msg is not None and msg.startswith(key)


@pytest.mark.parametrize("override,needle", [
    ("rl.lr=" + "9" * 400, "rl.lr: expected a number, got one too large"),  # was OverflowError
    ("seed=2024-13-45", "seed: expected an integer, got '2024-13-45'"),  # was ValueError from YAML's dates
    ("rl.steps=" + "9" * 5000, "rl.steps: expected an integer"),  # was ValueError: over 4,300 digits
    ("rl.lr=!!float abc", "rl.lr: expected a number"),  # was ValueError from the tag
    ("stages=" + "[" * 3000, "stages: value nested too deeply"),  # was RecursionError
    ("stages=[a, b", "stages: expected a list, got '[a, b'"),  # was yaml.ParserError
])
def test_values_that_used_to_raise_a_traceback(override, needle):
    assert needle in outcome([override])


def test_every_range_is_enforced_at_its_bound():
    for key, (bound, strict) in RANGES.items():
        tp = type(dataclasses.asdict(RunConfig())[key.split(".")[0]][key.split(".")[1]])
        below = bound if strict else (bound - 1 if tp is int else bound - 0.5)
        assert outcome([f"{key}={below}"]).startswith(f"{key}: expected "), key
        ok = bound + 1 if strict or tp is int else bound
        assert outcome([f"{key}={ok}"]) is None, key


@pytest.mark.parametrize("content,needle", [
    (b"rl:\n  lr: " + b"[" * 3000 + b"\n", "invalid YAML: nested too deeply"),
    (b"seed: 2024-13-45\n", "unreadable value"),
    (b"seed: 1\nrun_dir: \xff\xfe\n", "unreadable value"),
    (b"rl: [1, 2\n", "invalid YAML"),
    (b"- 1\n- 2\n", "expected a mapping at the top level"),
])
def test_bad_config_files_are_one_line_naming_the_file(tmp_path, content, needle):
    p = tmp_path / "c.yaml"
    p.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).startswith(str(p)) and needle in str(e.value) and "\n" not in str(e.value)


def test_the_cli_prints_one_line_and_exits_2(capsys):
    assert main(["train", "--print-config", "rl.lr=.inf"]) == 2
    err = capsys.readouterr().err
    assert err == "codechat: error: rl.lr: expected a finite number, got inf\n"

"""MBPP+ OriginFmt records load as MBPP+ tasks: the shown asserts are the tests, the script's inputs and baked
results the base/plus data, judged with evalplus's comparison (atol, set and not-None rules, no broadcasting)
under a time limit from the reference's own time; a script of another shape runs as one test, with a warning."""
import gzip
import json
import time

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import load_tasks, load_tasks_with_format
from codechat.verifier.evalplus import score_evalplus
from codechat.verifier.verify import Verifier

# evalplus's helpers as MbppPlus-OriginFmt v0.2.0 writes them
IS_FLOATS = '''import numpy as np
from math import inf

def is_floats(x) -> bool:
    # check if it is float; List[float]; Tuple[float]
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
    return False


'''
PLAIN = IS_FLOATS + '''def assertion(out, exp, atol):
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if out != exp and atol != 0:
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert out == exp, f"out: {out}, exp: {exp}"

'''
AS_SETS = PLAIN.replace("        atol = 1e-6\n", "        atol = 1e-6\n    out = set(out)\n    exp = set(exp)\n")
NOT_NONE = '''import numpy as np
from math import inf

def assertion(out, exp, atol):
    if isinstance(out, bool):
        exact_match = out == exp
    else:
        exact_match = exp == (out is not None)

'''
AREA = "def area(r):\n    return 3.141592653589793 * r * r\n"


def record(tid, code, entry, inputs, results, shown, helper=PLAIN, atol=0, imports=()):
    test = (helper + f"\ninputs = {inputs!r}\nresults = {results!r}\n"
            f"for i, (inp, exp) in enumerate(zip(inputs, results)):\n    assertion({entry}(*inp), exp, {atol})\n")
    return {"task_id": tid, "code": code, "prompt": f"Write {entry}.", "source_file": "x.ipynb",
            "test_imports": list(imports), "test_list": shown, "test": test}


def write(tmp_path, *records):
    path = tmp_path / "originfmt.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    return path


def area_task(tmp_path):
    rec = record(7, AREA, "area", [[1], [2], [0.5], [10]], [3.141592653589793 * r * r for r in (1, 2, 0.5, 10)],
                 ["assert math.isclose(area(1), 3.141592653589793, rel_tol=1e-6)"], atol=0.0001,
                 imports=["import math"])
    return load_tasks(write(tmp_path, rec))[0]


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=3.0)) as v:
        yield v


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path / "cache"))  # expected outputs: never a shared cache


def test_a_float_record_loads_as_an_mbppplus_task(tmp_path):
    t = area_task(tmp_path)
    assert t.tests == ["assert math.isclose(area(1), 3.141592653589793, rel_tol=1e-6)"] and t.setup == "import math"
    assert t.entry_point == "area" and t.solution == AREA and t.metadata["atol"] == 0.0001
    assert t.metadata["base_input"] == [[1]] and t.metadata["plus_input"] == [[2], [0.5], [10]]
    assert len(t.metadata["expected"]) == 4 and t.metadata["source"] == "mbpp-originfmt"


def test_empty_list_passes_the_files_own_float_script_but_not_the_loaded_task(verifier, tmp_path):
    pytest.importorskip("numpy")
    t = area_task(tmp_path)
    empty = "def area(r):\n    return []\n"
    ns = {}
    exec(compile(empty + t.setup + "\n" + json.loads(gzip.decompress(
        (tmp_path / "originfmt.jsonl.gz").read_bytes()))["test"], "script", "exec"), ns)  # np.allclose broadcasts
    ref, none, wrong = verifier.verify_many([(t, AREA), (t, "def area(r):\n    return None\n"), (t, empty)])
    assert ref.passed and not none.passed and not wrong.passed, (ref, none, wrong)
    (rb, rp), (eb, ep), (cb, cp) = score_evalplus(verifier, [(t, AREA), (t, empty),
                                                             (t, AREA.replace("r * r", "r * r * 1.0001"))])
    assert rb.passed and rp.passed, (rb, rp)
    assert not eb.passed and not ep.passed, (eb, ep)
    assert cb.passed is False and cp.passed is False  # 1e-4 relative off is beyond atol 1e-4 at r=10


def test_set_rule_and_not_none_rule_are_evalplus_own(verifier, tmp_path):
    common = "def common(a, b):\n    return [x for x in a if x in b]\n"
    sets = record(1, common, "common", [[[1, 2, 3], [3, 2]], [[4], [5]]], [[2, 3], []],
                  ["assert set(common([1, 2, 3], [3, 2])) == {2, 3}"], helper=AS_SETS)
    match = "import re\ndef starts(s):\n    return re.match('a', s)\n"
    nn = record(2, match, "starts", [["abc"], ["bca"], ["a"]], [True, False, True],
                ["assert starts('abc')", "assert not starts('bca')"], helper=NOT_NONE)
    a, b = load_tasks(write(tmp_path, sets, nn))
    assert (a.metadata["oracle"], b.metadata["oracle"]) == ("set", "not_none")
    assert a.metadata["expected"] == [{2, 3}, set()]
    cases = [(a, common), (a, common.replace("[x for x in a if x in b]", "[x for x in b if x in a]")),  # order
             (a, common.replace("if x in b]", "if x in b][:1]")),
             (b, match), (b, match.replace("return re.match('a', s)", "return bool(re.match('a', s))")),
             (b, match.replace("return re.match('a', s)", "return False"))]  # False is a bool: not "not None"
    got = [plus.passed for _, plus in score_evalplus(verifier, cases)]
    assert got == [True, True, False, True, True, False]


def test_the_time_limit_comes_from_the_references_time(verifier, tmp_path):
    slow = "import time\ndef nap(x):\n    time.sleep(0.4)\n    return x\n"
    rec = record(3, slow, "nap", [[i] for i in range(10)], list(range(10)), ["assert nap(0) == 0"])
    t = load_tasks(write(tmp_path, rec))[0]
    inputs = [[i] for i in range(10)]
    assert verifier.verify_io(t, slow, inputs, list(range(10))).status == "timeout"  # 4 s past the 3 s limit
    t0 = time.time()
    (base, plus), = score_evalplus(verifier, [(t, slow)])
    assert base.passed and plus.passed, plus
    assert time.time() - t0 >= 8  # the reference once (4 s), then the answer on base + plus


def test_a_script_of_another_shape_runs_as_one_test_with_a_warning(verifier, tmp_path):
    rec = {"task_id": 9, "code": "def f(x):\n    return x + 1\n", "prompt": "Add one.", "test_imports": [],
           "test_list": ["assert f(1) == 2"], "test": "for x in range(5):\n    assert f(x) == x + 1\n"}
    with pytest.warns(UserWarning, match="1 of 1 MBPP.*weaker tests"):
        tasks, fmt = load_tasks_with_format(write(tmp_path, rec))
    t = tasks[0]
    assert fmt == "mbpp-originfmt" and t.tests == [rec["test"]] and "base_input" not in t.metadata
    good, bad = verifier.verify_many([(t, rec["code"]), (t, "def f(x):\n    return 1\n")])
    assert good.passed and not bad.passed


def test_the_real_file_loads_every_record_as_mbppplus(shared_data, recwarn):
    of = {t.task_id: t for t in load_tasks(shared_data / "mbpp" / "MbppPlus-OriginFmt-v0.2.0.jsonl.gz")}
    assert not [w for w in recwarn if "OriginFmt" in str(w.message)]
    plus = {t.task_id: t for t in load_tasks(shared_data / "mbpp" / "MbppPlus-v0.2.0.jsonl.gz")}
    assert len(of) == 378 and all("base_input" in t.metadata for t in of.values())
    assert sum("expected" not in t.metadata for t in of.values()) == 3  # 88, 255, 630: the reference gives them
    same = [tid for tid, t in of.items() if (t.entry_point, t.metadata["atol"], len(t.metadata["base_input"]))
            == (plus[f"Mbpp/{tid}"].entry_point, plus[f"Mbpp/{tid}"].metadata["atol"],
                len(plus[f"Mbpp/{tid}"].metadata["base_input"]))]
    assert len(same) == 377  # task 223: one of its shown asserts is no MBPP+ base input


def test_the_real_files_slow_and_float_tasks(verifier, shared_data):
    tasks = {t.task_id: t for t in load_tasks(shared_data / "mbpp" / "MbppPlus-OriginFmt-v0.2.0.jsonl.gz")}
    slow = [tasks[i] for i in ("271", "392", "599", "603", "630")]  # their scripts ran 20 s to 93 s
    refs = verifier.verify_many([(t, t.solution) for t in slow])
    assert all(r.passed for r in refs), refs
    nothing = verifier.verify_many([(t, f"def {t.entry_point}(*a, **k):\n    return {v}\n")
                                    for t in slow for v in ("None", "[]")])
    assert not any(r.passed for r in nothing)
    sphere = tasks["82"]  # floats within atol 1e-4
    (rb, rp), (eb, ep) = score_evalplus(verifier, [(sphere, sphere.solution),
                                                   (sphere, "def volume_sphere(r):\n    return []\n")])
    assert rb.passed and rp.passed and not eb.passed and not ep.passed, (rp, ep)

"""extract_code: which code a completion holds, one completion shape per test."""
import time

from codechat.tasks import Task
from codechat.verifier.extract import extract_code

MBPP = Task("1", "Write a function add(a, b).\nYour code should pass this test:\nassert add(1, 2) == 3\n",
            ["assert add(1, 2) == 3"], "add")
HE = Task("HumanEval/0", 'from typing import List\n\ndef add(a: int, b: int) -> int:\n    """Add."""\n',
          ["def check(candidate):\n    assert candidate(1, 2) == 3\ncheck(add)\n"], "add")


def test_plain_code_is_taken_as_is():
    assert extract_code("def add(a, b):\n    return a + b\n", MBPP) == "def add(a, b):\n    return a + b\n"


def test_python_fence():
    c = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
    assert extract_code(c, MBPP) == "def add(a, b):\n    return a + b\n"


def test_bare_fence():
    assert extract_code("```\ndef add(a, b):\n    return a + b\n```", MBPP) == "def add(a, b):\n    return a + b\n"


def test_block_defining_entry_point_wins_over_later_block():
    c = "```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n```"
    assert "def add" in extract_code(c, MBPP)


def test_last_block_when_none_defines_entry_point():
    c = "```python\nx = 1\n```\n```python\ny = 2\n```"
    assert extract_code(c, MBPP) == "y = 2\n"


def test_python_block_preferred_over_other_languages():
    c = "```bash\npip install nothing\n```\n```python\ndef add(a, b):\n    return a + b\n```"
    assert extract_code(c, MBPP).startswith("def add")


def test_unterminated_fence_runs_to_the_end():
    assert extract_code("```python\ndef add(a, b):\n    return a + b\n", MBPP).startswith("def add")


def test_leading_prose_is_dropped():
    c = "Sure! Here is the solution.\ndef add(a, b):\n    return a + b\n"
    assert extract_code(c, MBPP) == "def add(a, b):\n    return a + b\n"


def test_prose_only_is_no_code():
    assert extract_code("I am sure all the tests pass.", MBPP) is None


def test_empty_and_whitespace_are_no_code():
    assert extract_code("", MBPP) is None and extract_code("  \n\t", MBPP) is None


def test_empty_fence_is_no_code():
    assert extract_code("```python\n```", MBPP) is None


def test_humaneval_body_continues_the_prompt():
    code = extract_code("    return a + b\n", HE)
    assert code == HE.prompt + "    return a + b\n"


def test_humaneval_full_function_comes_after_the_prompt_imports():
    code = extract_code("```python\ndef add(a, b):\n    return a + b\n```", HE)
    assert code.startswith("from typing import List") and code.rstrip().endswith("return a + b")


def test_a_fence_inside_a_string_does_not_cut_the_block():
    task = Task("md", "", ["assert f() == 'a```b'"], "f")
    code = extract_code("Here:\n```python\ndef f():\n    return 'a```b'\n```\n", task)
    assert code is not None and "return 'a```b'" in code


def test_extraction_stays_linear_on_hostile_fences():
    task = Task("x", "", ["assert f()"], "f")
    t0 = time.process_time()
    for text in ("```python\n" + "\n" * 200_000, "`" * 200_000, "```\n" * 50_000):
        extract_code(text, task)
    assert time.process_time() - t0 < 5.0  # the quadratic scans took minutes on these


def test_a_fence_may_open_after_text_on_its_line_and_close_at_a_line_end():
    task = Task("add", "", ["assert add(1, 2) == 3"], "add")
    code = extract_code("Here:```python\ndef add(a, b):\n    return a + b```\nDone.", task)
    assert code is not None and code.strip() == "def add(a, b):\n    return a + b"


def test_a_helper_in_an_earlier_fence_comes_with_the_solution():
    task = Task("h", "", ["assert area(2) == 12"], "area")
    text = "First a helper:\n```python\ndef square(x):\n    return x * x\n```\nThen:\n```python\ndef area(r):\n" \
           "    return 3 * square(r)\n```\nAnd a usage example:\n```python\nprint(area(2))\n```\n"
    code = extract_code(text, task)
    assert "def square" in code and code.index("def square") < code.index("def area") and "print(" not in code
    lone = extract_code("```python\ndef unused():\n    pass\n```\n```python\ndef area(r):\n    return r\n```", task)
    assert "unused" not in lone  # a block the solution does not use stays out

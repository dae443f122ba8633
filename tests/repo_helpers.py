"""The clamp repository task the repository-judge tests share: a boundary bug, a visible test that passes with
it, hidden tests that need the fix."""
from codechat.tasks.repo import RepoTask

BUGGY = "def clamp(x, lo, hi):\n    if x < lo:\n        return hi\n    if x > hi:\n        return hi\n    return x\n"
FIXED = BUGGY.replace("return hi\n    if x > hi", "return lo\n    if x > hi")
TASK = RepoTask("clamp", "clamp(-5, 0, 10) returns 10", {
    "lib/__init__.py": "", "lib/bounds.py": BUGGY,
    "tests/test_bounds.py": "from lib.bounds import clamp\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n"},
    hidden_tests={"tests/test_hidden.py": "from lib.bounds import clamp\n\ndef test_low():\n    assert clamp(-5, 0, 10) == 0\n"
                                           "\n\ndef test_high():\n    assert clamp(50, 0, 10) == 10\n"},
    visible_tests=["tests/test_bounds.py"])

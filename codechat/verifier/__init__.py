"""Judge completions: extract code, run it with the task's tests through the sandbox, return a `Verdict`.

`verify` (the `Verifier` over a local sandbox pool), `extract` (code extraction), `ray_backend` (the same API on a
Ray cluster), `factory.make_verifier` (picks the backend), `verdict` (the typed result), `evalplus` (MBPP+/HumanEval+
base/plus oracles).
"""
from codechat.verifier.verdict import Verdict
from codechat.verifier.extract import extract_code
from codechat.verifier.verify import Verifier
from codechat.verifier.factory import make_verifier

__all__ = ["Verdict", "Verifier", "extract_code", "make_verifier"]

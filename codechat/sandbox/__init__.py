"""Run untrusted Python under isolation and limits, and judge it from a process it never touches.

Layout: `isolation` (namespaces, rlimits, uid, reaping), `wire` (plain-data encoding and framing),
`candidate` (runs the program, answers calls), `judge` + `modes` (run the tests / compare outputs),
`zygote` (warm pre-imported forker), `pool` (parent side: `SandboxPool`, `Job`, `RunResult`).
This package knows nothing of RL or tasks; `codechat.verify` builds on it.
"""
from codechat.sandbox.isolation import Limits
from codechat.sandbox.pool import Job, RunResult, SandboxPool

__all__ = ["Job", "Limits", "RunResult", "SandboxPool"]

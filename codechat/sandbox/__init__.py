"""Run untrusted Python under isolation and limits, and judge it from a process it never touches.

Layout: `isolation` (namespaces, rlimits, uid, reaping), `wire` (plain-data encoding), `frames` (framing),
`candidate` (runs the program, answers calls), `audit_hook` (what the program touched),
`judge` + `modes` (run the tests / compare outputs),
`zygote` (warm pre-imported forker), `supervisor` (runs each job for its zygote; `spare`: the pre-forked
candidates; `judge_proc` + `job_proc`: the judge and each job's process; `tmp_drop` unmounts old /tmp dirs),
`pool` (parent side: `SandboxPool`, `Job`, `RunResult`).
This package knows nothing of RL or tasks; `codechat.verifier.verify` builds on it.
"""
__all__ = ["Job", "Limits", "RunResult", "SandboxPool"]


def __getattr__(name: str):
    # Lazy: the zygote imports submodules of this package, and every module it imports makes each fork slower.
    if name == "Limits":
        from codechat.sandbox.isolation import Limits  # lazy: see above
        return Limits
    if name in ("Job", "RunResult", "SandboxPool"):
        from codechat.sandbox import pool  # lazy: the zygote never loads the parent-side pool
        return getattr(pool, name)
    raise AttributeError(name)

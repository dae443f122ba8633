"""The sandbox's protection layers by name: what each does, the warning when some are missing, `--check`'s report.

A zygote reports the layers it could set up (`active`); the names are the keys of PROTECTIONS.
"""
from __future__ import annotations

PROTECTIONS = {  # what each layer a zygote reports as active does (`codechat verify --check` prints these)
    "network": "network namespace: no interfaces, not even loopback",
    "fresh_root": "fresh root: Python and site-packages read-only, own /proc, /dev, /tmp; no host files, "
                  "no codechat tasks or checkout",
    "pid_namespace": "PID namespace per program: everything it started dies with it",
    "ipc_namespace": "IPC namespace per program: no SysV or POSIX IPC objects shared or kept",
    "own_uid": "own unprivileged uid per worker: process cap, no signals or ptrace to ours, no root-only files",
    "seccomp": "seccomp filter: no ptrace, mount, namespaces, bpf, perf, keyrings, kexec, modules; "
               "sockets AF_UNIX only",
    "judge_unprivileged": "the judge drops root once set up: own uid, PID, IPC and mount namespaces, seccomp; "
                          "each job's task code runs in a process forked for it from a pristine judge",
    "memory_cgroup": "memory cgroup per worker: memory_mb holds for all of a program's processes together, "
                     "its /tmp files and memfds; without it memory_mb is each process's address space only "
                     "(x nproc processes), /tmp is capped at 256 MiB, unmapped memfds are not counted",
}
ALL_PROTECTIONS = tuple(PROTECTIONS)
ALWAYS = "rlimits, own session, scrubbed env, temp cwd, separate judge process"


def missing_protections_message(active: list[str]) -> str | None:
    """The one warning printed when some protection is unavailable here, or None when all are active."""
    missing = [p for p in ALL_PROTECTIONS if p not in active]
    if not missing:
        return None
    return (f"codechat sandbox: reduced isolation on this machine; active: {', '.join(active) or 'none'} "
            f"(+ always: {ALWAYS}); missing: {', '.join(missing)}")


def protection_report(active: list[str]) -> list[str]:
    """One line per protection: active or missing, and what it does (`codechat verify --check`)."""
    lines = [f"{'active ' if p in active else 'MISSING'} {p:<18} {d}" for p, d in PROTECTIONS.items()]
    return lines + [f"always  {'basics':<18} {ALWAYS}"]

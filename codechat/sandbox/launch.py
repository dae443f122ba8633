"""Start one command of a repository workspace under the sandbox's isolation, then exec it.

Run by `workspace.run_isolated` as `python -S -m codechat.sandbox.launch SPEC_JSON`, already in a session of
its own. In order: enter fresh network + mount namespaces (`isolation.enter_namespaces`: no network, the fresh
root of rootfs.py with the workspace bound read-only at its own path; workspaces live outside the sandbox's
/tmp, see `workspace.scratch_dir`),
chdir into the workspace, apply the rlimits, drop to the uid of its own (`isolation.sandbox_uid()`, derived from this pid: the parent knows it),
and exec the command with a scrubbed environment. Nothing of the command has run before the exec.

The workspace is owned by root and not writable by that uid: a command can read the repository and write
to its private /tmp, never change the workspace (only the agent's tools, run by the parent, do).
Imports only what the zygote imports (`isolation`): this runs once per command.
"""
from __future__ import annotations

import json
import os
import sys

from codechat.sandbox import isolation

CHANNEL_FD = 3
"""The fd a command's result pipe has (`run_isolated(channel=True)`), as in a warm test run."""


def main(spec: dict) -> None:
    isolation.enter_workspace(spec["workspace"], tuple(spec.get("hide", ())), tuple(spec.get("binds", ())),
                              spec["rlimits"])
    argv = spec["argv"]
    chan = spec.get("channel", -1)
    if chan >= 0 and chan != CHANNEL_FD:  # the result pipe at the same number as in a warm run
        os.dup2(chan, CHANNEL_FD)
        os.close(chan)
    os.execve(argv[0], argv, spec["env"])


if __name__ == "__main__":
    try:
        main(json.loads(sys.argv[1]))
    except BaseException as e:  # noqa: BLE001 - report why the launch failed; the command never ran
        print(f"codechat sandbox launch failed: {type(e).__name__}: {e}", file=sys.stderr)
        os._exit(71)

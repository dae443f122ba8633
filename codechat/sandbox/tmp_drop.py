"""Unmounting each program's old /tmp off the supervisor's thread (`rootfs.fresh_tmp(drop=...)`).

An unmount returns only after an RCU grace period (milliseconds, more on a loaded machine), and the supervisor
did that once per program, between two programs. A parked /tmp is already out of every program's reach (it
sits below a directory only root may enter, and every process that used it is gone); this thread unmounts it
while the next program runs. Runs in the supervisor only: the zygote never imports threading.
"""
from __future__ import annotations

import threading

from codechat.sandbox import rootfs


class Dropper:
    """One daemon thread unmounting `rootfs.PARKED` once per `__call__` (parked mounts stack there; each
    unmount takes the top one). An unmount that fails is raised by the next call: the supervisor stops, and
    the pool reports the worker broken rather than keep stacking mounts."""

    def __init__(self):
        self._pending = threading.Semaphore(0)
        self.error: OSError | None = None
        threading.Thread(target=self._run, name="tmp-drop", daemon=True).start()

    def __call__(self) -> None:
        if self.error is not None:
            raise self.error
        self._pending.release()

    def _run(self) -> None:
        while True:
            self._pending.acquire()
            try:
                rootfs.umount(rootfs.PARKED)
            except OSError as e:
                self.error = e
                return

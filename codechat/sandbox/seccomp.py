"""A seccomp filter for sandboxed programs: a small hand-written BPF program, installed with prctl.

Defence in depth behind the namespaces and the unprivileged uid: even a program that found a kernel bug
reachable through these calls cannot make them. Denied with EPERM: ptrace, process_vm_readv/writev, mount,
umount2, pivot_root, chroot, the new mount API (open_tree, move_mount, fsopen, fsconfig, fsmount, fspick,
mount_setattr), unshare, setns, clone with any CLONE_NEW* flag, bpf, perf_event_open, userfaultfd, keyctl,
add_key, request_key, kexec_load, kexec_file_load, init/finit/delete_module, open_by_handle_at, io_uring_*,
reboot, swapon/swapoff, acct, quotactl. socket() with a family other than AF_UNIX fails with EAFNOSUPPORT.
clone3 fails with ENOSYS (its flags sit in memory a filter cannot read; libc then falls back to clone, whose
flags it can). The filter checks the architecture first (x86_64 and aarch64; any other, including the x32 ABI
on x86_64, is killed) and sets no_new_privs, so nothing exec'd later can gain privileges.

No libseccomp binding is on PyPI in a maintained form usable here, and the filter is 60-odd instructions.
`install()` runs in each forked program (the zygote builds the program once: `prepare()`); it needs no privilege.
"""
from __future__ import annotations

import ctypes
import os
import struct

# BPF opcodes (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JEQ_K, JSET_K, JGE_K, RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
AF_UNIX = 1
CLONE_NEW_FLAGS = 0x7E020080  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME (0x80)

# seccomp_data: nr (u32) at 0, arch (u32) at 4, instruction pointer at 8, args (u64 each) from 16
_NR, _ARCH, _ARG0_LO = 0, 4, 16

DENIED = {  # name: (x86_64, aarch64)
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "unshare": (272, 97), "setns": (308, 268), "bpf": (321, 280), "perf_event_open": (298, 241),
    "userfaultfd": (323, 282), "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "open_by_handle_at": (304, 265),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "reboot": (169, 142), "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89),
    "quotactl": (179, 60),
}
SOCKET = (41, 198)
CLONE = (56, 220)
CLONE3 = (435, 435)


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(arch: str) -> bytes:
    """The BPF program for `arch` (x86_64 or aarch64), as the bytes of a `struct sock_filter[]`."""
    col = 0 if arch == "x86_64" else 1
    deny = sorted({nrs[col] for nrs in DENIED.values()})
    tail = [  # the actions, jumped to from the checks
        _ins(RET_K, SECCOMP_RET_ALLOW),                       # allow
        _ins(RET_K, SECCOMP_RET_ERRNO | EPERM),               # eperm
        _ins(RET_K, SECCOMP_RET_ERRNO | ENOSYS),              # enosys
        _ins(RET_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),        # eafnosupport
        _ins(RET_K, SECCOMP_RET_KILL_PROCESS),                # kill
    ]
    ALLOW, EPERM_, ENOSYS_, EAFNO, KILL = range(5)
    body: list[tuple] = [  # (code, k, jt target, jf target): targets are ("tail", i), "next", or ("at", label)
        (LD_W_ABS, _ARCH, None, None),
        (JEQ_K, AUDIT_ARCH[arch], "next", ("tail", KILL)),
        (LD_W_ABS, _NR, None, None),
    ]
    if arch == "x86_64":
        body.append((JGE_K, X32_SYSCALL_BIT, ("tail", KILL), "next"))
    body += [(JEQ_K, nr, ("tail", EPERM_), "next") for nr in deny]
    body.append((JEQ_K, CLONE3[col], ("tail", ENOSYS_), "next"))
    body.append((JEQ_K, SOCKET[col], ("at", "socket"), "next"))
    body.append((JEQ_K, CLONE[col], ("at", "clone"), "next"))
    body.append((RET_K, SECCOMP_RET_ALLOW, None, None))
    labels = {"socket": len(body)}
    body += [(LD_W_ABS, _ARG0_LO, None, None), (JEQ_K, AF_UNIX, ("tail", ALLOW), ("tail", EAFNO))]
    labels["clone"] = len(body)
    body += [(LD_W_ABS, _ARG0_LO, None, None), (JSET_K, CLONE_NEW_FLAGS, ("tail", EPERM_), ("tail", ALLOW))]
    n = len(body)

    def offset(i: int, target) -> int:
        if target in (None, "next"):
            return 0
        where = n + target[1] if target[0] == "tail" else labels[target[1]]
        return where - i - 1

    out = b"".join(_ins(code, k, offset(i, jt), offset(i, jf)) for i, (code, k, jt, jf) in enumerate(body))
    return out + b"".join(tail)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_prepared: tuple | None = None  # (buffer, fprog, byref(fprog)): kept alive for the forked children


def prepare() -> bool:
    """Build the filter for this machine once (in the zygote); False if the architecture is not supported."""
    global _prepared
    arch = os.uname().machine
    if arch not in AUDIT_ARCH:
        return False
    prog = filter_program(arch)
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.addressof(buf))
    _prepared = (buf, fprog, ctypes.byref(fprog))
    return True


def install(prctl) -> bool:
    """Set no_new_privs and install the prepared filter on the calling thread (`prctl`: libc's, resolved once)."""
    if _prepared is None:
        return False
    if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, _prepared[2], 0, 0) == 0

"""The seccomp filter of sandboxed programs (codechat/sandbox/seccomp.py): one denied call per test inside the
sandbox (root), and the BPF program itself run by a reference interpreter for both architectures, checked
call by call and fuzzed against a plain-Python statement of the policy (no root needed).
"""
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat.config import VerifierConfig
from codechat.sandbox import seccomp
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="the sandbox applies the filter under its namespaces (root)")
ARCH = os.uname().machine
T = Task("probe", "", ["assert probe() == 'ok'"], "probe")


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=1, timeout_s=5, memory_mb=512)) as v:
        yield v


def run(v, body: str):
    code = "import os, ctypes\ndef probe():\n" + "".join(f"    {ln}\n" for ln in body.splitlines())
    return v.verify(T, code)


CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
DENIED_CALLS = {  # name -> (syscall, args): each must fail with EPERM inside
    "ptrace_traceme": ("ptrace", (0, 0, 0, 0)),
    "unshare_user_ns": ("unshare", (CLONE_NEWUSER,)),
    "setns": ("setns", (0, 0)),
    "mount_tmpfs": ("mount", (0, 0, 0, 0, 0)),
    "bpf": ("bpf", (0, 0, 0)),
    "perf_event_open": ("perf_event_open", (0, 0, -1, -1, 0)),
    "keyctl": ("keyctl", (0, 0)),
    "add_key": ("add_key", (0, 0, 0, 0, 0)),
    "kexec_load": ("kexec_load", (0, 0, 0, 0)),
    "userfaultfd": ("userfaultfd", (0,)),
    "io_uring_setup": ("io_uring_setup", (1, 0)),
}


@root_only
@pytest.mark.skipif(ARCH not in seccomp.AUDIT_ARCH, reason="filter for x86_64 and aarch64 only")
@pytest.mark.parametrize("attack", sorted(DENIED_CALLS))
def test_seccomp_denies(verifier, attack):
    name, args = DENIED_CALLS[attack]
    nr = seccomp.DENIED[name][0 if ARCH == "x86_64" else 1]
    v = run(verifier, "libc = ctypes.CDLL(None, use_errno=True)\n"
                      f"r = libc.syscall({nr}, *{args!r})\n"
                      "return 'ok' if r == -1 and ctypes.get_errno() == 1 else repr((r, ctypes.get_errno()))")
    assert v.passed, v.message


@root_only
@pytest.mark.skipif(ARCH not in seccomp.AUDIT_ARCH, reason="filter for x86_64 and aarch64 only")
def test_seccomp_denies_clone_into_a_new_user_namespace(verifier):
    nr = seccomp.CLONE[0 if ARCH == "x86_64" else 1]
    v = run(verifier, "libc = ctypes.CDLL(None, use_errno=True)\n"
                      f"r = libc.syscall({nr}, {CLONE_NEWUSER | SIGCHLD}, 0, 0, 0, 0)\n"
                      "if r == 0:\n    os._exit(0)\n"
                      "return 'ok' if r == -1 and ctypes.get_errno() == 1 else repr(r)")
    assert v.passed, v.message


@root_only
@pytest.mark.parametrize("family", ["AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET"])
def test_seccomp_allows_only_unix_sockets(verifier, family):
    v = run(verifier, f"import socket, errno\ntry:\n    socket.socket(socket.{family}, socket.SOCK_DGRAM)\n"
                      "except OSError as e:\n    return 'ok' if e.errno == errno.EAFNOSUPPORT else repr(e)\n"
                      "return 'made one'")
    assert v.passed, v.message
    assert run(verifier, "import socket\na, b = socket.socketpair()\na.send(b'x')\n"
                         "return 'ok' if b.recv(1) == b'x' else 'no'").passed


def _bpf_run(prog: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """A reference BPF interpreter for the few opcodes the filter uses, over one seccomp_data."""
    data = struct.pack("=IIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    ins = [struct.unpack_from("=HBBI", prog, i) for i in range(0, len(prog), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        if code == seccomp.LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == seccomp.RET_K:
            return k
        else:
            cond = {seccomp.JEQ_K: acc == k, seccomp.JGE_K: acc >= k, seccomp.JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if cond else jf)


@pytest.mark.parametrize("arch", sorted(seccomp.AUDIT_ARCH))
def test_seccomp_filter_decides_each_call_as_documented(arch):
    col = 0 if arch == "x86_64" else 1
    prog, audit = seccomp.filter_program(arch), seccomp.AUDIT_ARCH[arch]
    errno_of = lambda r: r & 0xFFFF if r & 0xFFFF0000 == seccomp.SECCOMP_RET_ERRNO else None  # noqa: E731
    for name, nrs in seccomp.DENIED.items():
        assert errno_of(_bpf_run(prog, nrs[col], audit)) == seccomp.EPERM, name
    assert _bpf_run(prog, 0, audit) == seccomp.SECCOMP_RET_ALLOW  # read (x86_64) / io_setup (aarch64)
    assert errno_of(_bpf_run(prog, seccomp.CLONE3[col], audit)) == seccomp.ENOSYS
    assert _bpf_run(prog, seccomp.SOCKET[col], audit, arg0=1) == seccomp.SECCOMP_RET_ALLOW
    assert errno_of(_bpf_run(prog, seccomp.SOCKET[col], audit, arg0=2)) == seccomp.EAFNOSUPPORT
    assert _bpf_run(prog, seccomp.CLONE[col], audit, arg0=SIGCHLD) == seccomp.SECCOMP_RET_ALLOW
    assert errno_of(_bpf_run(prog, seccomp.CLONE[col], audit, arg0=CLONE_NEWUSER | SIGCHLD)) == seccomp.EPERM
    other = next(a for a in seccomp.AUDIT_ARCH.values() if a != audit)
    assert _bpf_run(prog, 0, other) == seccomp.SECCOMP_RET_KILL_PROCESS  # the other architecture's numbers
    if arch == "x86_64":
        assert _bpf_run(prog, 0x40000000, audit) == seccomp.SECCOMP_RET_KILL_PROCESS  # x32 ABI


@root_only
def test_the_filter_is_on_with_no_new_privs(verifier):
    v = run(verifier, "st = dict(ln.split(':', 1) for ln in open('/proc/self/status').read().splitlines())\n"
                      "return 'ok' if st['Seccomp'].strip() == '2' and st['NoNewPrivs'].strip() == '1' else repr(st)")
    assert v.passed, v.message


def _spec_decision(arch: str, nr: int, audit: int, arg0: int) -> int:
    """What seccomp.py's docstring promises, written as plain Python (the reference for the BPF program)."""
    col = 0 if arch == "x86_64" else 1
    if audit != seccomp.AUDIT_ARCH[arch] or (arch == "x86_64" and nr >= 0x40000000):
        return seccomp.SECCOMP_RET_KILL_PROCESS
    if nr in {nrs[col] for nrs in seccomp.DENIED.values()}:
        return seccomp.SECCOMP_RET_ERRNO | seccomp.EPERM
    if nr == seccomp.CLONE3[col]:
        return seccomp.SECCOMP_RET_ERRNO | seccomp.ENOSYS
    if nr == seccomp.SOCKET[col] and arg0 & 0xFFFFFFFF != seccomp.AF_UNIX:
        return seccomp.SECCOMP_RET_ERRNO | seccomp.EAFNOSUPPORT
    if nr == seccomp.CLONE[col] and arg0 & seccomp.CLONE_NEW_FLAGS:
        return seccomp.SECCOMP_RET_ERRNO | seccomp.EPERM
    return seccomp.SECCOMP_RET_ALLOW


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(seccomp.AUDIT_ARCH)),
       st.one_of(st.integers(0, 500), st.sampled_from([0x40000000, 0x40000029, 0xFFFFFFFF])),
       st.sampled_from(sorted(seccomp.AUDIT_ARCH.values()) + [0x40000003]),
       st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([1, 2, 17, CLONE_NEWUSER | SIGCHLD, 1 << 32 | 2])))
def test_seccomp_filter_matches_its_specification(arch, nr, audit, arg0):
    assert _bpf_run(PROGRAMS[arch], nr, audit, arg0) == _spec_decision(arch, nr, audit, arg0)


PROGRAMS = {a: seccomp.filter_program(a) for a in seccomp.AUDIT_ARCH}

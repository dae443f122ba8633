"""Localhost in the sandbox: each repository command has loopback to itself (a network namespace per run), and
nothing it listens on reaches another run, the host or the judge; answer programs reach no one's sockets either.

One attack per test. Concurrency is ordered by what the host sees, not by sleeps: a run's abstract unix socket
shows in /proc/PID/net/unix of its own network namespace (`bound_somewhere`), and a run holding its sockets
waits for a file the test writes into the (read-only to it) workspace.
"""
import os
import secrets
import socket
import subprocess
import sys
import threading
import time

import pytest

from codechat.config import VerifierConfig
from codechat.sandbox import isolation
from codechat.sandbox.isolation import rmtree
from codechat.sandbox.workspace import run_isolated, scratch_dir
from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge
from codechat.verifier.verify import Verifier
from sandbox_helpers import ROOT, T, root_only, run

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(isolation.__file__))))
HAS_IPV6 = os.path.exists("/proc/net/if_inet6")


def bound_somewhere(name: str) -> bool:
    """Whether the abstract unix socket `@name` is bound in any network namespace of this machine (one read of
    /proc/PID/net/unix per namespace)."""
    seen = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
            if ns in seen:
                continue
            seen.add(ns)
            with open(f"/proc/{pid}/net/unix") as f:
                if any(line.rstrip().endswith(" @" + name) for line in f):
                    return True
        except OSError:
            pass
    return False


def wait_bound(name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not bound_somewhere(name):
        assert time.monotonic() < deadline, f"@{name} never bound"
        time.sleep(0.05)


@pytest.fixture()
def ws():
    d = scratch_dir()
    yield d
    rmtree(str(d))


def command(ws, code: str, timeout_s: float = 30.0):
    r = run_isolated([sys.executable, "-I", "-c", code], ws, timeout_s=timeout_s)
    assert r.status == "ok", r
    return r.output


SELF = r'''
import errno, socket
print("hosts", socket.gethostbyname("localhost"))
for fam, addr in ((socket.AF_INET, "localhost"), (socket.AF_INET6, "::1")):
    s = socket.socket(fam)
    try:
        s.bind((addr, 0))
    except OSError as e:
        print(fam.name, "unbound", errno.errorcode[e.errno])
        continue
    s.listen()
    c = socket.create_connection(s.getsockname()[:2], timeout=5)
    a, _ = s.accept()
    c.sendall(b"ping")
    print(fam.name, a.recv(4).decode())
u = socket.socket(socket.AF_UNIX)
u.bind("\0codechat-self")
u.listen()
socket.socket(socket.AF_UNIX).connect("\0codechat-self")
print("unix", u.accept()[0].fileno() > 0)
'''


def test_a_repository_command_serves_and_reaches_itself_on_localhost(ws):
    out = command(ws, SELF)
    assert "hosts 127.0.0.1" in out and "AF_INET ping" in out and "unix True" in out, out
    if HAS_IPV6:
        assert "AF_INET6 ping" in out, out


@root_only
def test_the_fresh_root_names_localhost_and_looks_up_the_hosts_file_only(ws):
    out = command(ws, "print(open('/etc/hosts').read()); print(open('/etc/nsswitch.conf').read())")
    assert "127.0.0.1 localhost" in out and "::1 localhost" in out and "hosts: files" in out


@root_only
def test_a_repository_commands_uid_has_a_name(ws):
    # django's createsuperuser tests take the user's name as the default username, and loop forever without one
    out = command(ws, "import getpass, os, pwd\nprint(getpass.getuser(), pwd.getpwuid(os.getuid()).pw_dir, "
                      "os.getuid() >= 1_000_000, pwd.getpwuid(0).pw_name)")
    assert out.split() == ["codechat", "/tmp", "True", "root"], out


PROBE = r'''
import errno, socket, sys
def attempt(what, fam, addr, kind=socket.SOCK_STREAM):
    s = socket.socket(fam, kind)
    s.settimeout(3)
    try:
        s.connect(addr)
        if kind == socket.SOCK_DGRAM:
            s.send(b"x")
            s.recv(1)
        print(what, "REACHED")
    except OSError as e:
        print(what, "refused" if e.errno == errno.ECONNREFUSED else errno.errorcode.get(e.errno, e))
attempts = eval(sys.argv[1])
for what, fam, addr, kind in attempts:
    attempt(what, fam, addr, kind)
'''


def probe(ws, attempts: list[tuple]) -> str:
    spec = repr([(w, int(f), a, int(k)) for w, f, a, k in attempts])
    r = run_isolated([sys.executable, "-I", "-c", PROBE, spec], ws, timeout_s=30)
    assert r.status == "ok", r
    return r.output


def test_a_repository_command_reaches_none_of_the_hosts_sockets(ws):
    tok = "codechat-host-" + secrets.token_hex(6)
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + tok)
    unix.listen()
    attempts = [("tcp", socket.AF_INET, tcp.getsockname(), socket.SOCK_STREAM),
                ("udp", socket.AF_INET, udp.getsockname(), socket.SOCK_DGRAM),
                ("unix", socket.AF_UNIX, "\0" + tok, socket.SOCK_STREAM)]
    if HAS_IPV6:
        tcp6 = socket.create_server(("::1", 0), family=socket.AF_INET6)
        attempts.append(("tcp6", socket.AF_INET6, tcp6.getsockname()[:2], socket.SOCK_STREAM))
    out = probe(ws, attempts)
    assert "REACHED" not in out and all(f"{a[0]} " in out for a in attempts), out
    for s in (tcp, unix) + ((tcp6,) if HAS_IPV6 else ()):
        s.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing ever connected
            s.accept()
    udp.setblocking(False)
    with pytest.raises(BlockingIOError):
        udp.recv(1)


HOLD = r'''
import os, socket, sys, time
port, tok, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tcp = socket.create_server(("127.0.0.1", port))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", port))
unix = socket.socket(socket.AF_UNIX)
unix.bind("\0" + tok)
unix.listen()
socket.create_connection(("localhost", port), timeout=5).close()
tcp.accept()[0].close()
print("self ok")
deadline = time.monotonic() + 25
while not os.path.exists(done) and time.monotonic() < deadline:
    time.sleep(0.02)
for name, s in (("tcp", tcp), ("unix", unix), ("udp", udp)):
    s.setblocking(False)
    try:
        s.recv(1) if name == "udp" else s.accept()
        print(name, "GOT")
    except BlockingIOError:
        print(name, "none")
'''


def test_two_concurrent_repository_commands_cannot_reach_each_other(ws):
    port = socket.create_server(("127.0.0.1", 0)).getsockname()[1]  # any port: each run has all of its own
    tok = "codechat-run-" + secrets.token_hex(6)
    done = ws / "done"
    held = {}
    holder = threading.Thread(target=lambda: held.update(out=run_isolated(
        [sys.executable, "-I", "-c", HOLD, str(port), tok, str(done)], ws, timeout_s=40).output))
    holder.start()
    try:
        wait_bound(tok)
        out = probe(ws, [("tcp", socket.AF_INET, ("127.0.0.1", port), socket.SOCK_STREAM),
                         ("udp", socket.AF_INET, ("127.0.0.1", port), socket.SOCK_DGRAM),
                         ("unix", socket.AF_UNIX, "\0" + tok, socket.SOCK_STREAM)])
    finally:
        done.write_text("")
        holder.join()
    assert out.count("refused") == 3, out
    assert "self ok" in held["out"] and "GOT" not in held["out"] and held["out"].count(" none") == 3, held["out"]


WARM_TEST = '''import os, socket, time
import pytest
from lib import mode

PORT, NAME = {port}, "\\0{tok}"


def test_localhost_of_this_run_only():
    if mode.MODE == "serve":  # leave a daemon listening on TCP and an abstract socket, and check it serves
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                tcp = socket.create_server(("127.0.0.1", PORT))
                unix = socket.socket(socket.AF_UNIX)
                unix.bind(NAME)
                unix.listen()
                os.write(w, b"1")
                for fd in set(range(1024)) - {{tcp.fileno(), unix.fileno()}}:  # (the run's pipes: it may end)
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                time.sleep(60)
            os._exit(0)
        assert os.read(r, 1) == b"1"
        socket.create_connection(("localhost", PORT), timeout=5).close()
        socket.socket(socket.AF_UNIX).connect(NAME)
    else:
        assert mode.MODE == "probe"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("localhost", PORT), timeout=5)
        with pytest.raises(ConnectionRefusedError):
            socket.socket(socket.AF_UNIX).connect(NAME)
'''


@pytest.fixture(scope="module")
def judges():
    with RepoJudge() as cold, RepoJudge(warm=True) as warm:
        yield {"cold": cold, "warm": warm}


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_a_listener_left_by_one_run_is_not_reachable_from_the_next(judges, kind):
    port = socket.create_server(("127.0.0.1", 0)).getsockname()[1]
    tok = "codechat-next-" + secrets.token_hex(6)
    task = RepoTask("net", "", {"lib/__init__.py": "", "lib/mode.py": "MODE = None\n"},
                    hidden_tests={"tests/test_net.py": WARM_TEST.format(port=port, tok=tok)})
    judge = judges[kind]
    for mode in ("serve", "probe"):
        v = judge.judge(task, {"lib/mode.py": f"MODE = {mode!r}\n"})
        assert v.passed, (mode, v.message, v.output_tail)
    if kind == "warm":
        assert judge.warm.runs >= 2


UNPRIVILEGED = r'''
import socket, sys
from codechat.sandbox import isolation
active = isolation.enter_namespaces(loopback=True)
s = socket.create_server(("127.0.0.1", 0))
socket.create_connection(s.getsockname(), timeout=5).close()
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=3)
    print(active, "host REACHED")
except ConnectionRefusedError:
    print(active, "host refused")
'''


@root_only
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="a system Python that any uid may run")
def test_unprivileged_the_command_has_its_own_loopback_and_not_the_hosts():
    host = socket.create_server(("127.0.0.1", 0))
    r = subprocess.run(["/usr/bin/python3", "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "exec(sys.argv[2])", PACKAGE_ROOT, UNPRIVILEGED, str(host.getsockname()[1])],
                       user=65534, group=65534, extra_groups=[], capture_output=True, text=True, timeout=60)
    if r.returncode == 0 and "'network'" not in r.stdout:
        pytest.skip(f"no unprivileged user namespaces here: {r.stdout}")
    assert "'loopback'" in r.stdout and "host refused" in r.stdout, (r.stdout, r.stderr)


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=20, memory_mb=512, nproc=32)) as v:
        yield v


@root_only
def test_an_answer_program_finds_no_socket_it_could_connect_to(verifier):
    # the judge and the supervisor share the zygote's network namespace with the program: none of theirs has
    # an address (socketpairs only), and nothing listens on TCP or UDP there
    v = run(verifier, "named = [ln.split()[7] for ln in open('/proc/self/net/unix').read().splitlines()[1:]"
                      " if len(ln.split()) > 7]\n"
                      "inet = [ln for p in ('tcp', 'tcp6', 'udp', 'udp6') if os.path.exists('/proc/self/net/' + p)"
                      " for ln in open('/proc/self/net/' + p).read().splitlines()[1:]]\n"
                      "return 'ok' if not named and not inet else repr((named, inet))")
    assert v.passed, v.message


ABSTRACT_HOLD = ("s = __import__('socket').socket(1)\ns.bind('\\0{tok}')\ns.listen()\ns.setblocking(False)\n"
                 "end = time.monotonic() + 6\nwhile time.monotonic() < end:\n    try:\n        s.accept()\n"
                 "        return 'reached'\n    except BlockingIOError:\n        time.sleep(0.02)\nreturn 'ok'")
ABSTRACT_TRY = ("c = __import__('socket').socket(1)\ntry:\n    c.connect('\\0{tok}')\n    return 'reached'\n"
                "except ConnectionRefusedError:\n    return 'ok'")


@root_only
def test_an_abstract_socket_of_one_answer_program_is_not_reachable_from_another(verifier):
    tok = "codechat-answer-" + secrets.token_hex(6)
    held = {}
    holder = threading.Thread(target=lambda: held.update(v=run(verifier, ABSTRACT_HOLD.format(tok=tok))))
    holder.start()
    try:
        wait_bound(tok)
        tried = run(verifier, ABSTRACT_TRY.format(tok=tok))  # the other worker: another zygote, concurrently
        overlapped = holder.is_alive()  # the holder listens for 6 s: it was still listening when this tried
    finally:
        holder.join()
    assert tried.passed and overlapped, (tried.message, overlapped)
    assert held["v"].passed, held["v"]
    # and the next program of the same zygote, after the holder's run ended, finds nothing either
    assert run(verifier, ABSTRACT_TRY.format(tok=tok)).passed

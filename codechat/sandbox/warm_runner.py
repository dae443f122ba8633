"""The warm test runner: one interpreter per worker that has imported pytest once, forking each test run.

Started by `verifier/repo_warm.py` as `python -I warm_runner.py SOCKET_FD` (the interpreter of the task's
environment, or codechat's; PYTHONHASHSEED=0 as for a cold run), as root, in the host's namespaces, with
`start_new_session`. At start it imports the isolation code (`isolation.py`), then pytest and the modules
`repo_runner.py` imports before any repository is on the path, then pytest's built-in plugins and what each
`pytest.main` imports on its way (`readline`, `pdb`, ...), fills the standard library caches each run would
fill alike (`_fill_caches`), builds pytest's plugin manager and configuration as `pytest.main` first does
(`_prebuild`: the built-in plugins registered, nothing of a repository read), and freezes its objects out of the collector (`gc.freeze`, Python >= 3.10); it
reports the top-level modules it holds that a cold runner has not loaded when the tree joins the path
(`extra`: the isolation code's, the plugins', its own): a tree that holds a module of that name is run cold,
because a cold run would have imported the tree's module instead. It never imports a repository module and never runs
untrusted code: it only forks.

Per run the parent sends, over the socket, a JSON request (workspace, hide paths, binds, rlimits, environment)
and three fds (the spec pipe, the output pipe, the result pipe). The forked child does what `launch.py` and
`repo_runner.py` do for a cold run, in the same order: its own session; fd 0/1/2 = spec/output/output and the
result pipe as fd 3, every other fd closed (the socket to this process among them); fresh network and mount
namespaces with the fresh root holding the workspace (`isolation.enter_namespaces`, the same call as
launch.py); chdir; rlimits; the uid of its own; the scrubbed environment; an audit hook that thaws the frozen
objects when the run lists objects or referrers; then `repo_runner.main()`, whose `pytest.main` starts from the
prebuilt configuration (`_use_prebuilt`) and reads the tree's ini files and conftests as a cold run does. All the
child changes (module globals, sys.modules, pytest's state) is its own copy-on-write memory, gone when it
exits; the next run forks again from this unchanged process. Replies: {"pid"} per run; per {"op": "wait"},
every process of that run is killed (`isolation.reap_uid` on its session and uid, in a small process forked
before pytest was imported: `_start_reaper`) and {"status"} comes back.
"""
import sys

START = {m.split(".", 1)[0] for m in sys.modules}  # what `python -I` has loaded before any script runs
import gc  # noqa: E402 - after START: every module this script adds is counted as the warm process's
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import _socket  # noqa: E402
import struct  # noqa: E402

SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(SANDBOX_DIR))
N_FDS = 3


def _top_names() -> set:
    return {m.split(".", 1)[0] for m in sys.modules}


def _isolation():
    sys.path.insert(0, PACKAGE_ROOT)
    try:
        from codechat.sandbox import isolation  # here: `python -I` has no codechat on its path
    finally:
        sys.path.remove(PACKAGE_ROOT)
    for name in [m for m in sys.modules if m == "codechat" or m.startswith("codechat.")]:
        del sys.modules[name]  # (the functions keep their globals; a test's `import codechat` fails as when cold)
    return isolation


def _start_reaper(isolation, sock: _socket.socket) -> _socket.socket:
    """A process forked before pytest is imported that kills every process of a finished run on request
    (`isolation.reap_uid` forks to take the run's uid: forking this small process costs a fraction of forking
    the warm one, whose page tables are several times larger). Ends when this process closes the socket."""
    mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    if os.fork() == 0:
        try:
            sock.close()
            mine.close()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)  # (the start-up error pipe is the warm process's to close)
            os.close(null)
            while True:
                msg = theirs.recv(64)
                if not msg:
                    break
                pid = int(msg)
                isolation.reap_uid(isolation.sandbox_uid(pid), pid)
                theirs.send(b"done")
        finally:
            os._exit(0)
    theirs.close()
    return mine


def _reap(isolation, reaper: _socket.socket, pid: int) -> None:
    """Every process of the run killed: by the reaper process, or from here if it is gone."""
    try:
        reaper.send(str(pid).encode())
        if reaper.recv(64) == b"done":
            return
    except OSError:
        pass
    isolation.reap_uid(isolation.sandbox_uid(pid), pid)


def _load(isolation):
    """(repo_runner module, extra top-level names)."""
    import importlib.util
    where = importlib.util.spec_from_file_location("repo_runner", os.path.join(SANDBOX_DIR, "repo_runner.py"))
    repo_runner = importlib.util.module_from_spec(where)  # (by path: sys.path stays that of `python -I`)
    where.loader.exec_module(repo_runner)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    before = _top_names()
    import pytest  # noqa: F401 - what repo_runner.main imports before the tree is on the path
    import _pytest.assertion.rewrite, _pytest.python, _pytest.reports, _pytest.runner, _pytest.unittest  # noqa: E401,F401
    import pluggy  # noqa: F401
    runner_imports = _top_names() - before  # what a cold runner has loaded too when the tree joins the path
    import _pytest.config
    lazy = ("_pytest._argcomplete", "faulthandler", "pdb", "readline")  # what every pytest.main imports on its way
    for name in [f"_pytest.{p}" for p in getattr(_pytest.config, "default_plugins", ())] + list(lazy):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _fill_caches()
    repo_runner.repo_guard._helpers()  # where the standard library's frame helpers live, found once
    prebuilt = _prebuild(repo_runner.ARGS)
    return repo_runner, prebuilt, sorted(_top_names() - START - runner_imports)


def _prebuild(args: list):
    """pytest's plugin manager and configuration as `pytest.main(args + ...)` first builds them
    (`_pytest.config.get_config`: the built-in plugins registered, their options added), before any run, or
    None where that function is not the one expected. It reads nothing of a repository: the files of the tree
    (ini files, conftests) are read later, in the run, when the configuration parses its arguments."""
    import inspect
    import _pytest.config as cfg
    try:
        params = inspect.signature(cfg.get_config).parameters
        if list(params)[:2] != ["args", "plugins"] or not hasattr(cfg.Config, "InvocationParams"):
            return None
        kw = {"prog": "pytest.main()"} if "prog" in params else {}  # what pytest.main passes on (pytest >= 9)
        os.environ.pop("PYTEST_DEBUG", None)  # (a run clears every PYTEST_* variable before pytest starts)
        return cfg.get_config(list(args), None, **kw), kw
    except Exception:  # noqa: BLE001 - any other pytest: each run builds its own, as a cold run does
        return None


def _use_prebuilt(prebuilt, args: list) -> None:
    """The run's first `get_config` call answers the configuration built before the fork (its invocation
    parameters those of this call) when it is called as `_prebuild` expected; the real function is back
    before it returns, so that the repository's code, which runs later, finds pytest's own."""
    import _pytest.config as cfg
    config, kw = prebuilt
    real = cfg.get_config

    def get_config(call_args=None, plugins=None, **call_kw):
        cfg.get_config = real
        if call_kw != kw or list(call_args or [])[:len(args)] != list(args):
            return real(call_args, plugins, **call_kw)
        config.invocation_params = cfg.Config.InvocationParams(args=tuple(call_args), plugins=plugins,
                                                               dir=sys.modules["pathlib"].Path.cwd())
        return config
    cfg.get_config = get_config


def _fill_caches() -> None:
    """Fill the standard library's caches that every run would fill again with the same content: inspect's
    file -> module map of the modules loaded here (a failure's traceback asks for it), tokenize's compiled
    pattern (the failing line's source), fnmatch's patterns of pytest's default python_files, norecursedirs
    and doctest glob. Each cache only answers what it would compute anew; a run's own modules and patterns
    are added in its copy."""
    import fnmatch
    import inspect
    import io
    import tokenize
    inspect.getmodule(_fill_caches.__code__)  # (a code object: the lookup walks sys.modules)
    list(tokenize.generate_tokens(io.StringIO("pass\n").readline))
    for pattern in ("test_*.py", "*_test.py", "test*.txt", "*.egg", ".*", "_darcs", "build", "CVS", "dist",
                    "node_modules", "venv", "{arch}"):
        fnmatch.fnmatch("x", pattern)


def _child(isolation, repo_runner, prebuilt, req: dict, fds: list) -> None:
    os.setsid()
    spec_r, out_w, chan_w = fds
    os.dup2(spec_r, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.dup2(chan_w, 3)
    os.closerange(4, 1 << 16)  # the socket to the warm process goes with them: a run cannot ask for forks
    isolation.enter_workspace(req["workspace"], tuple(req["hide"]), tuple(req["binds"]), req["rlimits"])
    # nothing taken while entering the sandbox survives into the run (a cold run loses it at execve): no handle
    # from before pivot_root, no namespace fd; the run starts with fds 0-3 only, as a cold one does
    os.closerange(4, 1 << 16)
    isolation.OWN_PIDNS_FD = -1
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [os.path.join(SANDBOX_DIR, "repo_runner.py"), "3"]
    random.seed()  # a cold run seeds from the OS; a fork would repeat this process's state
    if FREEZE:
        sys.addaudithook(_thaw_for_walks)
    if prebuilt is not None:
        _use_prebuilt(prebuilt, repo_runner.ARGS)
    repo_runner.main()


GC_WALKS = frozenset({"gc.get_objects", "gc.get_referrers"})
FREEZE = sys.version_info >= (3, 10)  # where listing objects or referrers is an audit event (bpo-43439)


def _thaw_for_walks(event: str, args) -> None:
    """The objects frozen before the fork (`serve`) are back in the collector's generations before a run lists
    objects or referrers, so that it finds what a cold run finds (sys.modules among a module's referrers)."""
    if event in GC_WALKS:
        gc.unfreeze()


def serve(sock: _socket.socket) -> None:
    isolation = _isolation()
    reaper = _start_reaper(isolation, sock)
    repo_runner, prebuilt, extra = _load(isolation)
    if FREEZE:
        gc.collect()
        # what is loaded now stays out of a run's collections (pytest's gc.collect() at each session's end
        # walked this whole heap, a cold run's too) and its pages stay shared after the fork: _thaw_for_walks
        gc.freeze()
    sock.send(json.dumps({"extra": extra, "pid": os.getpid()}).encode())
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)  # the parent stops reading start-up errors now: a later warning must not break this process
    os.close(null)
    space = _socket.CMSG_SPACE(N_FDS * 4)
    runs = set()  # forked runs not waited for yet
    while True:
        msg, anc, _, _ = sock.recvmsg(1 << 20, space)
        if not msg:
            return
        req = json.loads(msg)
        if req.get("op") == "wait":  # the run is over: every process of it killed (by the reaper, a small
            # process to fork from, unlike the judge's), then its exit status
            pid, status = int(req["pid"]), -1
            if pid in runs:
                runs.discard(pid)
                _reap(isolation, reaper, pid)
                try:
                    status = os.waitpid(pid, 0)[1]
                except ChildProcessError:
                    pass
            sock.send(json.dumps({"status": status}).encode())
            continue
        fds = list(struct.unpack(f"={N_FDS}i", anc[0][2][:N_FDS * 4])) if anc else []
        if len(fds) != N_FDS:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                _child(isolation, repo_runner, prebuilt, req, fds)
            except BaseException as e:  # noqa: BLE001 - report why the start failed; no test ran
                print(f"codechat sandbox launch failed: {type(e).__name__}: {e}", file=sys.stderr)
                sys.stderr.flush()
            os._exit(71)
        for fd in fds:
            os.close(fd)
        runs.add(pid)
        sock.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    serve(_socket.socket(fileno=int(sys.argv[1])))

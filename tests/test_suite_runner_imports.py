"""The repository test runner inside the sandbox (codechat/sandbox/suite_runner.py): pytest's plugins, and the
tree's pkg_resources namespace packages as the harness's editable install makes them."""
import subprocess
import sys

import pytest

from codechat.sandbox.suite_runner import pytest_args


def test_pytest_runs_without_xdist_unless_the_test_command_asks_for_workers(tmp_path):
    # installed but unused, pytest-xdist made pytest-rerunfailures bind a localhost socket, which the sandbox lacks
    pytest.importorskip("xdist")
    assert pytest_args(["-rA"]) == ["-p", "no:cacheprovider", "-p", "no:xdist", "-rA"]
    assert pytest_args(["-rA", "-n", "4"])[:3] == ["-p", "no:cacheprovider", "-rA"]
    assert "no:xdist" not in pytest_args(["--numprocesses=2"]) and "no:xdist" not in pytest_args(["-n2"])
    (tmp_path / "conftest.py").write_text(
        "def pytest_configure(config):\n    print('xdist loaded:', config.pluginmanager.hasplugin('xdist'))\n")
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    run = lambda args: subprocess.run([sys.executable, "-c", f"import pytest; pytest.main({args!r})"], cwd=tmp_path,
                                      capture_output=True, text=True).stdout
    assert "xdist loaded: True" in run(["-s"])
    assert "xdist loaded: False" in run(pytest_args(["-s"]))


def test_a_pkg_resources_namespace_of_the_tree_is_made_without_running_its_init(tmp_path):
    # matplotlib's lib/mpl_toolkits/__init__.py imports pkg_resources (a warning, an error in its tests); the
    # harness's editable install creates the namespace from its -nspkg.pth without running that file
    ns = tmp_path / "lib" / "mpl_toolkits"
    (ns / "mplot3d").mkdir(parents=True)
    (ns / "__init__.py").write_text("raise RuntimeError('ran')\n__import__('pkg_resources').declare_namespace(__name__)\n")
    (ns / "mplot3d" / "__init__.py").write_text("AXES = 3\n")
    (tmp_path / "lib" / "plain").mkdir()
    (tmp_path / "lib" / "plain" / "__init__.py").write_text("RAN = True\n")
    probe = ("import sys; from codechat.sandbox.suite_runner import legacy_namespaces; "
             f"print(legacy_namespaces([{str(tmp_path / 'lib')!r}, '/nonexistent'])); "
             f"sys.path.insert(0, {str(tmp_path / 'lib')!r}); import mpl_toolkits.mplot3d as m, plain; "
             "print(m.AXES, plain.RAN)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.split("\n")[:2] == ["['mpl_toolkits']", "3 True"], out.stderr


def test_the_tree_s_namespace_replaces_the_one_the_environment_s_nspkg_pth_made(tmp_path):
    # the environment's editable install leaves a -nspkg.pth that makes `mpl_toolkits` from the environment's own
    # source copy at startup; the tree under test must win, as in the harness where both are one directory
    for root, axes in (("env", "'env'"), ("tree", "'tree'")):
        ns = tmp_path / root / "mpl_toolkits"
        (ns / "mplot3d").mkdir(parents=True)
        (ns / "__init__.py").write_text("__import__('pkg_resources').declare_namespace(__name__)\n")
        (ns / "mplot3d" / "__init__.py").write_text(f"AXES = {axes}\n")
    env, tree = str(tmp_path / "env"), str(tmp_path / "tree")
    nspkg = ("import importlib.util, importlib.machinery; "
             f"sys.modules['mpl_toolkits'] = importlib.util.module_from_spec("
             f"importlib.machinery.PathFinder.find_spec('mpl_toolkits', [{env!r}]))")
    probe = (f"import sys; {nspkg}; from codechat.sandbox.suite_runner import legacy_namespaces; "
             f"print(legacy_namespaces([{tree!r}])); sys.path.insert(0, {tree!r}); "
             "import mpl_toolkits.mplot3d as m; print(m.AXES); print(legacy_namespaces([" + repr(tree) + "]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.split("\n")[:3] == ["['mpl_toolkits']", "tree", "[]"], out.stderr

"""No noise on the terminal that is not codechat's: transformers' loading/saving bars and the SyntaxWarnings
that model-written code raises when parsed or compiled (warnings about real files still show)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "default", "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                       "HOME": str(Path.home()), "OMP_NUM_THREADS": "1"})


def test_no_transformers_bars_when_loading_and_saving(tmp_path):
    r = run("from codechat.config import ModelConfig\nfrom codechat.policy import load_policy\n"
            f"p = load_policy(ModelConfig(path='tiny', device='cpu'))\np.save({str(tmp_path / 'm')!r})\n"
            f"load_policy(ModelConfig(path={str(tmp_path / 'm')!r}, device='cpu'))\nprint('ok')", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "Loading weights" not in r.stderr and "Writing model shards" not in r.stderr and "it/s" not in r.stderr


def test_model_code_syntax_warnings_are_silenced_but_real_files_are_not(tmp_path):
    r = run("import codechat, ast\n"
            "ast.parse('x = \"\\\\d\"\\nassert (x, 1)\\n')\n"
            "compile('y = 1 is 1\\nz = \"\\\\q\"', '<candidate>', 'exec')\n"
            "compile('w = 2 is 2', 'real.py', 'exec')\n", tmp_path)
    assert r.returncode == 0
    assert "<candidate>" not in r.stderr and "<unknown>" not in r.stderr
    assert 'real.py:1: SyntaxWarning: "is" with a literal' in r.stderr

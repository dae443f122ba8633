"""`codechat model`: create, info, sample; errors name the input."""
from codechat.cli import main
from policy_helpers import tiny_dir


def test_model_info_and_sample(tmp_path_factory, capsys):
    d = str(tiny_dir(tmp_path_factory))
    assert main(["model", "info", d]) == 0
    out = capsys.readouterr().out
    assert "LlamaForCausalLM" in out and "vocabulary: 1024" in out
    assert main(["model", "sample", d, "--prompt", "def f(x):", "-n", "2", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.count("--- sample") == 2


def test_model_create_tiny(tmp_path, capsys):
    assert main(["model", "create", "tiny", "--out", str(tmp_path / "t")]) == 0
    assert (tmp_path / "t" / "model.safetensors").is_file()
    assert "parameters: 2.5" in capsys.readouterr().out


def test_model_errors_are_one_line(tmp_path, capsys):
    assert main(["model", "info", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["model", "create", "huge", "--out", str(tmp_path / "h")]) == 2
    assert "tiny, small" in capsys.readouterr().err

"""The presets' tokenizer corpus is a fixed list of sets: adding a built-in set must not change any model."""
from codechat.policy.tokenizer import CORPUS_SETS, corpus_hash, corpus_texts
from codechat.tasks import builtin
from codechat.tasks.model import Task


def test_a_new_builtin_set_leaves_the_tokenizer_corpus_alone(monkeypatch):
    before = corpus_hash(corpus_texts(max_bytes=200_000))
    extra = [Task(task_id=f"new/{i}", prompt=f"def brand_new_{i}(x):\n", tests=["assert True"], entry_point="f")
             for i in range(50)]
    monkeypatch.setitem(builtin.GENERATED, "zz-new", lambda: extra)
    assert "zz-new" in builtin.builtin_names()
    assert corpus_hash(corpus_texts(max_bytes=200_000)) == before


def test_every_corpus_set_exists_and_holds_function_tasks():
    for name in CORPUS_SETS:
        tasks = builtin.load_builtin(f"builtin:{name}")
        assert tasks and all(t.kind == "function" for t in tasks), name

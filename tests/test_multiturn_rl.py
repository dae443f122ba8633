"""GRPO on repository tasks: G multi-turn episodes per task, the loss on model tokens only, log-probs over the
whole transcript, weights changed, episode metrics logged. Tiny preset on CPU, 2-turn episodes."""
import json

import pytest
import torch
from safetensors.torch import load_file

from codechat import CodechatError
from codechat import plugins
from codechat.config import ModelConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.rollout.episode import EpisodeRunner
from codechat.tasks import load_tasks
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train import rl, sft, train
from codechat.train.checkpoint import Checkpointer
from codechat.train.episodes import is_repo_batch
from codechat.verifier.repo import RepoVerdict

BASE = ["data.train=builtin:repo-train", "data.eval=", "log.progress=false", "log.plot=false",
        "checkpoint.every=0", "rl.prompts_per_step=2", "rl.group_size=2", "rl.lr=1e-3", "agent.turn_tokens=8",
        "sampling.max_new_tokens=8", "model.device=cpu"]


@pytest.fixture
def first_sample_passes(monkeypatch):
    """The tiny random model never resolves a task: the first episode of each group is judged passed (so the
    groups carry signal); the real judgement still runs on every episode."""
    real = EpisodeRunner._finish

    def finish(self, e, *queued):
        res = real(self, e, *queued)
        if res.sample == 0:
            res.verdict = RepoVerdict("passed", True, 1.0)
        return res
    monkeypatch.setattr(EpisodeRunner, "_finish", finish)


@pytest.fixture
def seen(monkeypatch):
    """Every (rollouts, rows) the trainer updated on."""
    calls, real = [], rl.rl_update

    def spy(ctx, r, adv, rows, ref, opt, a):
        calls.append((r, rows.clone(), adv.clone()))
        return real(ctx, r, adv, rows, ref, opt, a)
    monkeypatch.setattr(rl, "rl_update", spy)
    return calls


def test_grpo_on_repo_tasks_trains_on_model_tokens_only(tmp_path, short_tasks, first_sample_passes, seen):
    run = tmp_path / "grpo"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.steps=2"]))
    assert len(seen) == 2
    for r, rows, adv in seen:
        assert len(r.episodes) == 4 and len(rows) == 4
        for i, e in enumerate(r.episodes):
            t = e.transcript
            n = int(r.batch.n_tokens[i])
            row = r.batch.tokens[i, :n].tolist()
            assert r.prompts[int(r.batch.prompt_index[i])] == t.tokens[:t.prompt_len]
            assert row == t.tokens[t.prompt_len:t.prompt_len + n]  # the transcript after the prompt
            model_at = [j - t.prompt_len for j in range(t.prompt_len, len(t.tokens)) if t.is_model[j]]
            assert r.batch.mask[i].nonzero().flatten().tolist() == model_at  # loss mask == model tokens, exactly
            assert len(t.turns) == 2 and any(not m for m in t.is_model[t.prompt_len:t.prompt_len + n])  # results
        # the episode's reward is every model token's advantage: sample 0 passed, sample 1 did not
        assert adv.tolist() == pytest.approx([0.7071, -0.7071] * 2, abs=1e-3)
    audit = [json.loads(line) for line in (run / "audit.jsonl").read_text().splitlines()]
    assert audit and all(a["reason"] in ("top reward",) or a["reason"].startswith("suspicious") for a in audit)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for m in rows:
        assert m["logp_gap_max"] < 1e-3  # update log-probs over the whole transcript == the sampler's, in context
        assert m["episode/turns"] == 2 and m["episode/truncated"] == 1.0 and m["episode/truncated/turns"] == 1.0
        for k in ("episode/tool_calls", "episode/tested_before_submit", "episode/protected_attempts",
                  "time/decode_s", "time/tools_s", "time/verify_s", "episode/model_tokens_mean", "loss"):
            assert k in m and m[k] == m[k]
        assert m["reward_mean"] == 0.5 and m["grad_norm"] > 0
    torch.manual_seed(0)  # the run's seed: the same initial tiny model
    before = load_policy(ModelConfig(path="tiny", device="cpu")).model.state_dict()
    after = load_file(str(Checkpointer(run).latest() / "model" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in after), "GRPO on episodes did not change the weights"


def test_repo_eval_set_inside_training_is_refused(tmp_path):
    with pytest.raises(CodechatError, match="data.eval: builtin:repo-heldout"):
        train(load_config(None, BASE + [f"run_dir={tmp_path}", "data.eval=builtin:repo-heldout"]))


def test_mixed_repo_and_function_tasks_are_refused():
    with pytest.raises(CodechatError, match="mixes repository tasks"):
        is_repo_batch(load_repo_tasks("builtin:repo-train")[:1] + load_tasks("builtin:toy")[:1])
    assert not is_repo_batch(load_tasks("builtin:toy")[:2])


@pytest.fixture
def sft_seen(monkeypatch):
    """Every (prompts, answers, masks) batch the SFT loss saw."""
    calls, real = [], sft.sft_loss

    def spy(policy, prompts, answers, masks=None):
        calls.append((prompts, answers, masks))
        return real(policy, prompts, answers, masks)
    monkeypatch.setattr(sft, "sft_loss", spy)
    return calls


def test_sft_on_expert_transcripts_learns_model_tokens_only(tmp_path, sft_seen, monkeypatch):
    tasks = {t.task_id: t for t in load_repo_tasks("builtin:repo-train")[:2]}  # the first has a wrong fix
    monkeypatch.setattr(plugins, "load_repo_tasks", lambda spec, repos=None: list(tasks.values()))
    got = []
    real = sft.expert_episodes
    monkeypatch.setattr(sft, "expert_episodes", lambda *a, **k: got.extend(real(*a, **k)) or got)
    run = tmp_path / "sft"
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[sft]", "sft.steps=2", "sft.batch_size=2",
                                    "sft.expert_wrong=0.5", "sft.warmup=0"]))
    assert len(got) == 2

    def wrote(e, fix):
        return [u.arguments for u in e.transcript.turns if u.tool == "write_file"] == \
            [{"path": p, "content": c} for p, c in fix.items()]
    wrong = [e for e in got if wrote(e, tasks[e.task_id].metadata["wrong_fix"])]
    right = [e for e in got if wrote(e, tasks[e.task_id].solution)]
    assert len(wrong) == 1 and len(right) == 1  # expert_wrong=0.5 of 2 tasks
    assert not wrong[0].verdict.passed  # plausible but wrong: the hidden tests catch it
    assert right[0].verdict.passed  # the reference fix resolves the task
    for e in got:
        assert [u.tool for u in e.transcript.turns] == ["read_file", "run_tests", "write_file", "run_tests", "submit"]
        assert e.tested_before_submit and not e.truncated
    by_prompt = {tuple(e.transcript.tokens[:e.transcript.prompt_len]): e for e in got}
    assert len(sft_seen) == 2
    for prompts, answers, masks in sft_seen:
        for p, a, m in zip(prompts, answers, masks):
            t = by_prompt[tuple(p)].transcript
            assert a == t.tokens[t.prompt_len:] and m == [float(x) for x in t.is_model[t.prompt_len:]]
            assert 0 < sum(m) < len(m)  # tool results are context, not targets
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["sft/expert_transcripts"] == 2 and rows[0]["sft/expert_resolved"] == 0.5
    torch.manual_seed(0)
    before = load_policy(ModelConfig(path="tiny", device="cpu")).model.state_dict()
    after = load_file(str(Checkpointer(run).latest() / "model" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in after)


def test_expert_wrong_share_out_of_range_is_refused(tmp_path):
    with pytest.raises(CodechatError, match="sft.expert_wrong"):
        train(load_config(None, BASE + [f"run_dir={tmp_path}", "stages=[sft]", "sft.expert_wrong=1.5"]))


def test_async_producer_runs_repo_episodes(tmp_path, short_tasks, first_sample_passes, seen):
    """rl.async_steps=1 on repository tasks: the producer's model copy acts in the episodes one update behind."""
    run = tmp_path / "async"
    train(load_config(None, BASE + [f"run_dir={run}", "rl.steps=2", "rl.async_steps=1", "log.audit=false"]))
    assert len(seen) == 2 and all(len(r.episodes) == 4 for r, _, _ in seen)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["async/staleness"] for m in rows] == [0.0, 1.0]
    for m in rows:
        assert m["episode/turns"] == 2 and "time/tools_s" in m and m["loss"] == m["loss"]
    assert rows[0]["logp_gap_max"] < 1e-3 and (rows[0]["grad_norm"] == 0 or rows[1]["logp_gap_max"] > 1e-4)


def test_rft_on_repo_tasks_keeps_passing_episodes_and_learns_their_model_tokens(tmp_path, short_tasks,
                                                                                 first_sample_passes, sft_seen,
                                                                                 monkeypatch):
    """rft on repository tasks: G episodes per task, the passing ones kept (here sample 0 of each group), the
    improve step's loss on exactly their model tokens."""
    from codechat.train import rollouts
    got = []
    real = rollouts.collect_episodes
    monkeypatch.setattr(rollouts, "collect_episodes", lambda *a, **k: got.append(real(*a, **k)) or got[-1])
    run = tmp_path / "rft"
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[rft]", "rft.prompts=2", "rft.group_size=2",
                                    "rft.steps=2", "rft.batch_size=2", "rft.lr=1e-3"]))
    assert len(got) == 1 and len(got[0].episodes) == 4
    passing = [e.transcript for e in got[0].episodes if e.sample == 0]
    want = {tuple(t.tokens[:t.prompt_len]): (t.tokens[t.prompt_len:], t.is_model[t.prompt_len:]) for t in passing}
    assert len(sft_seen) == 2
    for prompts, answers, masks in sft_seen:
        for p, a, m in zip(prompts, answers, masks):
            rest, is_model = want[tuple(p)]
            last = max(i for i, x in enumerate(is_model) if x) + 1  # up to the last model token
            assert a == rest[:last] and m == [float(x) for x in is_model[:last]]
            assert 0 < sum(m) < len(m)  # tool results are context, not targets
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["rft/kept"] == 2 and rows[0]["pass_rate"] == 0.5 and rows[0]["episode/turns"] == 2
    data = json.loads(next((run / "stages").glob("*-rft-round0.json")).read_text())["data"]
    assert len(data) == 2 and all(len(d) == 3 for d in data)  # saved with the mask: a resume trains the same
    torch.manual_seed(0)
    before = load_policy(ModelConfig(path="tiny", device="cpu")).model.state_dict()
    after = load_file(str(Checkpointer(run).latest() / "model" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in after), "RFT on episodes did not change the weights"


def test_dpo_on_repo_tasks_pairs_resolved_with_unresolved_episodes_on_their_model_tokens(
        tmp_path, short_tasks, first_sample_passes, monkeypatch):
    """dpo on repository tasks: a pair is a resolved and an unresolved episode of the same task (here sample 0
    and sample 1 of each group), each scored on exactly its model tokens."""
    from codechat.train import dpo, rollouts
    got, seen = [], []
    real_collect, real_lp = rollouts.collect_episodes, dpo.seq_logp
    monkeypatch.setattr(rollouts, "collect_episodes", lambda *a, **k: got.append(real_collect(*a, **k)) or got[-1])
    monkeypatch.setattr(dpo, "seq_logp", lambda m, p, a, pad_id: seen.append((p, a)) or real_lp(m, p, a, pad_id))
    run = tmp_path / "dpo"
    train(load_config(None, BASE + [f"run_dir={run}", "stages=[dpo]", "dpo.steps=2", "dpo.prompts_per_step=2",
                                    "dpo.group_size=2", "dpo.pairs_per_step=2", "dpo.lr=1e-3"]))
    assert len(got) == 2 and len(seen) == 4  # per step: the reference's and the policy's log-probs
    for step, r in enumerate(got):
        def side(sample):
            out = {}
            for e in r.episodes:
                if e.sample == sample:
                    t = e.transcript
                    last = max(i for i, x in enumerate(t.is_model) if x) + 1
                    out[tuple(t.tokens[:t.prompt_len])] = (t.tokens[t.prompt_len:last],
                                                          [float(x) for x in t.is_model[t.prompt_len:last]])
            return out
        chosen, rejected = side(0), side(1)
        for prompts, answers in seen[2 * step:2 * step + 2]:
            P = len(answers) // 2
            assert P == 2 and prompts[:P] == prompts[P:]
            for p, c, rj in zip(prompts[:P], answers[:P], answers[P:]):
                assert c == chosen[tuple(p)] and rj == rejected[tuple(p)]
                assert 0 < sum(c[1]) < len(c[1])  # tool results are context, not scored
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["dpo/pairs"] for r in rows] == [2, 2] and rows[0]["episode/turns"] == 2
    assert rows[0]["pass_rate"] == 0.5 and rows[0]["dpo/dpo_reward_margin"] == pytest.approx(0, abs=1e-6)
    torch.manual_seed(0)
    before = load_policy(ModelConfig(path="tiny", device="cpu")).model.state_dict()
    after = load_file(str(Checkpointer(run).latest() / "model" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in after), "DPO on episodes did not change the weights"


def test_episode_seq_logp_sums_exactly_the_model_tokens():
    """DPO's log-prob of an episode = the sum, over its model tokens only, of one plain forward pass's log-probs."""
    from codechat.train.dpo import seq_logp
    torch.manual_seed(0)
    model = load_policy(ModelConfig(path="tiny", device="cpu")).model.eval()
    prompt, rest = [5, 9, 13, 2], [7, 8, 30, 31, 32, 11, 12]
    mask = [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]  # a tool result in the middle
    with torch.no_grad():
        got = seq_logp(model, [prompt, prompt], [(rest, mask), rest], 0)
        ids = torch.tensor([prompt + rest])
        lp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1:-1].float(), -1)
        per = lp[torch.arange(len(rest)), torch.tensor(rest)]  # (T,)
    assert got[0].item() == pytest.approx((per * torch.tensor(mask)).sum().item(), abs=1e-4)
    assert got[1].item() == pytest.approx(per.sum().item(), abs=1e-4)  # a plain answer: every token


def test_offline_dpo_on_repo_tasks_is_refused_naming_the_file(tmp_path, short_tasks):
    src = tmp_path / "rollouts.jsonl"
    src.write_text(json.dumps({"task_id": "x", "completion": "c", "passed": True}) + "\n")
    with pytest.raises(CodechatError, match=r"dpo.source: .*rollouts.jsonl: offline pairs need single-answer tasks"):
        train(load_config(None, BASE + [f"run_dir={tmp_path / 'run'}", "stages=[dpo]", f"dpo.source={src}"]))

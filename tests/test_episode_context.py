"""Episodes and the model's context (truncation at a turn boundary, marked), and loss aggregation on episodes
(token-mean, sequence-mean over episodes, Dr. GRPO's constant, the mean over turns) against a loop over the
transcripts."""
import copy

import pytest
import torch

from codechat.algos import policy_loss
from codechat.config import AgentConfig, AlgoConfig, RewardConfig, SamplingConfig
from codechat.rollout.agents import ModelAgent, ScriptedAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.tools import format_call
from codechat.tasks.repo import RepoLimits
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.train.dist import loss_units
from codechat.train.episodes import episodes_to_rollouts
from codechat.verifier.repo import RepoJudge
from policy_helpers import tiny_policy

TASKS = generate_repo_tasks("train", 2, seed=3)


@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


def chatty(task, turn, last):
    """Reads the same file over and over: the transcript only grows."""
    return format_call("list_files") if turn % 2 else format_call("read_file", path=sorted(task.solution)[0])


def long_tasks():
    out = []
    for t in TASKS:
        t = copy.deepcopy(t)
        t.limits = RepoLimits(max_turns=40, max_tool_calls=40, max_tokens=10**6)
        out.append(t)
    return out


def test_context_ends_the_episode_before_a_turn_that_would_not_fit(judge):
    tasks = long_tasks()
    prompt = len(ScriptedAgent(chatty).prompt(tasks[0], judge.clone(tasks[0]).listing()))
    context, turn_tokens = prompt + 2000, 100
    runner = EpisodeRunner(ScriptedAgent(chatty, context=context), judge, AgentConfig(turn_tokens=turn_tokens))
    (r,) = runner.run([(tasks[0], 0)])
    t = r.transcript
    assert r.truncated == "context" and 2 <= len(t.turns) < 40
    assert all(u.model_start + turn_tokens <= context for u in t.turns)  # every turn began with its room
    assert len(t.tokens) + turn_tokens > context  # the next one would not have fitted
    # without the context the same episode goes on to the turn budget
    (free,) = EpisodeRunner(ScriptedAgent(chatty), judge, AgentConfig(turn_tokens=turn_tokens)).run([(tasks[0], 0)])
    assert free.truncated == "turns" and len(free.transcript.turns) == 40


def test_cut_to_context_keeps_whole_turns(judge):
    (r,) = EpisodeRunner(ScriptedAgent(chatty), judge, AgentConfig()).run([(long_tasks()[1], 0)])
    t = r.transcript
    context = t.turns[3].model_end + 5  # inside turn 3's tool result
    c = r.cut_to_context(context)
    ct = c.transcript
    assert c.truncated == "context" and len(ct.tokens) <= context and len(ct.turns) == 4
    assert ct.tokens == t.tokens[:len(ct.tokens)] and ct.is_model == t.is_model[:len(ct.tokens)]
    assert len(ct.tokens) == ct.turns[-1].model_end  # the turn's model tokens whole, its result cut off
    assert r.cut_to_context(len(t.tokens)) is r and r.cut_to_context(None) is r
    assert len(r.cut_to_context(t.prompt_len).transcript.turns) == 0


def test_model_episodes_stop_at_the_context_and_fit_the_update(judge, tmp_path_factory):
    pol = tiny_policy(tmp_path_factory)
    pol.eos_token_ids = ()  # (a fresh policy) no EOS: turns never end the episode, only the context can
    agent = ModelAgent(pol, SamplingConfig(temperature=1.0))
    assert agent.context == 1024  # the model's own
    tasks = long_tasks()
    ws = judge.clone(tasks[0])
    context = len(agent.prompt(tasks[0], ws.listing())) + 100  # a short context keeps the test quick
    ws.remove()
    agent.context = context
    res = EpisodeRunner(agent, judge, AgentConfig(turn_tokens=40)).run([(tasks[0], 0), (tasks[0], 1)], seed=2)
    for r in res:  # the episode ends at a turn boundary, before the sampler could run out of room
        assert r.truncated == "context" and r.transcript.turns
        assert all(u.model_start + 40 <= context for u in r.transcript.turns)
    ro = episodes_to_rollouts(tasks[:1], res, 2, 0, RewardConfig(), 10**6)
    assert ro.batch.finish_reason == ["length", "length"]  # marked truncated for rl.mask_truncated
    assert all(len(ro.prompts[0]) + int(n) <= context for n in ro.batch.n_tokens)  # every row fits the context


def scripted_rollouts(judge):
    """4 episodes (2 tasks x 2) of different lengths: the mask has holes on every tool result."""
    def script(task, turn, last):
        return chatty(task, turn, last) + " " * (7 * turn + 3 * (task is tasks[1]))

    tasks = long_tasks()
    for t, n in zip(tasks, (3, 6)):
        t.limits.max_turns = n
    res = EpisodeRunner(ScriptedAgent(script), judge, AgentConfig()).run([(t, g) for t in tasks for g in range(2)])
    return res, episodes_to_rollouts(tasks, res, 2, 0, RewardConfig(), 10**6)


@pytest.mark.parametrize("mode,norm", [("token-mean", 0.0), ("seq-mean-token-mean", 0.0),
                                       ("seq-mean-token-sum", 0.0), ("seq-mean-token-sum-norm", 4096.0),
                                       ("turn-mean", 0.0)])
def test_aggregation_on_episodes_matches_a_loop_over_transcripts(judge, mode, norm):
    res, ro = scripted_rollouts(judge)
    N, T = ro.batch.tokens.shape
    g = torch.Generator().manual_seed(1)
    logp = (-torch.rand(N, T, generator=g)).requires_grad_(True)  # (N, T)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5])  # (N,)
    cfg = AlgoConfig(loss="reinforce", agg=mode, agg_norm=norm)
    loss, _ = policy_loss("reinforce", logp, logp.detach(), adv, ro.batch.mask, cfg)
    loss.backward()
    # the slow reference: each episode's model tokens, found from its transcript, not from the batch mask
    # and each model turn's tokens from the runner's Turn records
    per_ep, model_at, turns = [], [], []
    for i, e in enumerate(res):
        t = e.transcript
        at = [k - t.prompt_len for k in range(t.prompt_len, len(t.tokens)) if t.is_model[k]]
        model_at.append(at)
        per_ep.append([-adv[i].item() * logp[i, j].item() for j in at])
        turns += [(i, range(u.model_start - t.prompt_len, u.model_end - t.prompt_len)) for u in t.turns]
    n_tok, n_ep, n_turns = sum(len(a) for a in model_at), len(res), len(turns)
    want = {"token-mean": sum(map(sum, per_ep)) / n_tok,
            "seq-mean-token-mean": sum(sum(x) / len(x) for x in per_ep) / n_ep,
            "seq-mean-token-sum": sum(map(sum, per_ep)) / n_ep,
            "seq-mean-token-sum-norm": sum(map(sum, per_ep)) / n_ep / (norm or 1),
            "turn-mean": sum(sum(-adv[i].item() * logp[i, j].item() for j in k) / len(k)
                             for i, k in turns) / n_turns}[mode]
    assert loss.item() == pytest.approx(want, rel=1e-5)
    grad = torch.zeros(N, T)
    for i, at in enumerate(model_at):
        w = {"token-mean": 1 / n_tok, "seq-mean-token-mean": 1 / (len(at) * n_ep), "seq-mean-token-sum": 1 / n_ep,
             "seq-mean-token-sum-norm": 1 / (n_ep * (norm or 1)), "turn-mean": 0.0}[mode]
        grad[i, at] = -adv[i] * w
    for i, k in turns if mode == "turn-mean" else ():
        grad[i, list(k)] = -adv[i] / (len(k) * n_turns)
    assert torch.allclose(logp.grad, grad, atol=1e-7)  # no gradient on tool results nor padding
    units = {"token-mean": n_tok, "turn-mean": n_turns}.get(mode, n_ep)
    assert loss_units(ro.batch.mask, mode) == units
    assert len({len(a) for a in model_at}) > 1  # episodes of different lengths
    assert len({len(k) for _, k in turns}) > 1 and n_turns > n_ep  # turns of different lengths
    assert all((ro.batch.mask[i, :int(ro.batch.n_tokens[i])] == 0).any() for i in range(N))  # holes on results

"""Learning when not to think: per-mode metrics, the `nothink-bonus` constraint, balanced (forced) sampling.

A completion is in mode `think` when its thinking block is non-blank, else `nothink` (verifier/thinking.py splits
it; the verdict carries `thought`). Three pieces, each usable alone:

- `thinking_metrics(r, cfg, count_tokens)`: share of no-think answers, pass rate and length per mode, thinking
  tokens per sample (logged by the RL loop under `thinking/` when verifier.thinking is on).
- `NothinkConstraint`: the reward `nothink-bonus` (rollout/rewards.py) gives delta = its weight to every no-think
  answer. The constrained problem is AdaptThink's (Zhang et al., 2025, "AdaptThink: Reasoning Models Can Learn
  When to Think", eq. 1-3): maximise P(nothink) subject to pass >= pass_ref - margin. AdaptThink folds the
  constraint into the reward as delta * 1[nothink] + R(x, y) - R_ref(x) with a per-prompt reference pass rate;
  under group-normalised advantages (GRPO/RLOO) a per-prompt constant cancels, so we keep the constraint with a
  Lagrange multiplier instead (dual ascent, the standard primal-dual form of constrained RL):
      reward   = pass + delta * s_t * 1[nothink],      s_t = 1 / (1 + lambda_t)
      lambda_{t+1} = max(0, lambda_t + nothink_lr * (pass_ref - margin - pass_t))
  pass_ref is the mean pass rate of the first `nothink_ref_steps` steps (lambda held at 0 meanwhile: one batch
  is a noisy bound), pass_t the step's pass rate (of a balanced batch: the policy's, importance-weighted). While accuracy holds, lambda stays 0 and the full bonus
  applies; when it drops below pass_ref - margin, lambda grows and the bonus shrinks toward 0, so accuracy wins.
  nothink_lr 0 = fixed bonus.
- `BalancedSampler`: wraps a rollout engine; of each group of G, u = round(free_frac * G) samples are sampled
  freely, round(f * (G - u)) start with the forced empty block `open + close` and the rest with the forced `open`
  tag (AdaptThink's importance sampling: the initial model almost never skips thinking, so without forcing there
  is no no-think sample to learn from). The forced tokens are part of the completion; those the two prefixes
  share (e.g. `<` `think`) are masked out of the forced samples' loss (no choice of the policy there), the rest
  get gradient. `is_weights` gives each sample w = pi_theta(path) / q(path), q the stratified mixture the group
  is drawn from (forced shares plus u/G times the policy), detached; a free sample off both paths (a malformed
  opening) weighs G/u. E_q[w A grad log pi(y)] = E_pi[A grad log pi(y)]: the policy's own gradient
  (tests/test_thinking_weights.py, against an enumeration). `is_weight_floor` > 0 trades that exactness for a
  cold start; `recenter` then subtracts each group's w-weighted mean advantage, so the weighted advantages of a
  group sum to 0 and tokens no sample chose at the shared choice position get no push (with the floored weights
  they did, and the free samples drifted to openings such as `<thinkerthink>`: docs/thinking.md).
Samples are labelled by the tokens they hold: when the open tag's ids begin the empty block's (single-token
tags, as Qwen3 and R1-style tokenizers have), a forced-think sample that closes at once is an empty block, and
its weight counts every stratum that can produce it. Simplified: each forced prefix is encoded whole, as SFT text encodes it (the model could also write the same
text as other tokens; a free sample that does counts as off both paths); balanced sampling is not combined with
`rl.zero_variance: resample` nor with `rl.async_steps > 0` (refused by the config check).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from codechat import CodechatError
from codechat.config import RewardConfig, ThinkingConfig
from codechat.policy.sampler import SampleBatch, pad_rows
from codechat.verifier.thinking import split_thinking
from codechat.tasks.repo_loaders import is_repo_spec

BONUS = "nothink-bonus"


def thinking_metrics(r, cfg: ThinkingConfig, count_tokens: Callable[[str], int]) -> dict[str, float]:
    """`thinking/nothink_frac`, `thinking/pass_rate/{think,nothink}`, `thinking/len/{think,nothink}` (mean tokens;
    a mode absent from the batch is left out) and `thinking/tokens_mean` (thinking tokens per sample)."""
    thought = [v.thought for v in r.verdicts]
    n = max(len(thought), 1)
    out = {"thinking/nothink_frac": sum(not t for t in thought) / n}
    lens = r.batch.n_tokens.tolist()
    for mode, want in (("think", True), ("nothink", False)):
        idx = [i for i, t in enumerate(thought) if t == want]
        if idx:
            out[f"thinking/pass_rate/{mode}"] = sum(r.verdicts[i].passed for i in idx) / len(idx)
            out[f"thinking/len/{mode}"] = sum(lens[i] for i in idx) / len(idx)
    tokens = [count_tokens(split_thinking(t, cfg).thinking) if th else 0 for t, th in zip(r.batch.texts, thought)]
    out["thinking/tokens_mean"] = sum(tokens) / n
    return out


class NothinkConstraint:
    """The Lagrange multiplier of the pass-rate constraint; its state goes into the checkpoint (state_dict)."""

    def __init__(self, cfg: RewardConfig):
        self.cfg = cfg
        self.lam = 0.0
        self.ref_pass: float | None = None
        self.ref_n = 0  # steps averaged into ref_pass

    def apply(self, r, pass_t: float | None = None) -> dict[str, float]:
        """Scale this step's `nothink-bonus` by 1 / (1 + lambda) (in r.rewards and r.components), then update
        lambda from this step's pass rate (pass_t: over all ranks; default: of r). -> metrics."""
        if BONUS not in r.components:
            return {}
        scale = 1.0 / (1.0 + self.lam)
        bonus = r.components[BONUS]  # (N,) weighted bonus
        r.rewards = r.rewards - (1.0 - scale) * bonus
        r.components[BONUS] = bonus * scale
        pass_t = r.passed.mean().item() if pass_t is None else pass_t
        if self.ref_n < self.cfg.nothink_ref_steps:  # the reference: the running mean of the first steps
            self.ref_n += 1
            self.ref_pass = pass_t if self.ref_pass is None else self.ref_pass + (pass_t - self.ref_pass) / self.ref_n
        elif self.cfg.nothink_lr > 0:
            gap = self.ref_pass - self.cfg.nothink_margin - pass_t  # > 0: constraint violated
            self.lam = max(0.0, self.lam + self.cfg.nothink_lr * gap)
        return {"thinking/lambda": self.lam, "thinking/bonus_scale": scale, "thinking/ref_pass": self.ref_pass}

    def state_dict(self) -> dict:
        return {"lam": self.lam, "ref_pass": self.ref_pass, "ref_n": self.ref_n}

    def load_state_dict(self, d: dict) -> None:
        self.lam = float(d.get("lam", 0.0))
        self.ref_pass = d.get("ref_pass")
        self.ref_n = int(d.get("ref_n", 0 if self.ref_pass is None else 1))


def well_formed(text: str, cfg: ThinkingConfig) -> bool:
    """The completion opens (leading blanks aside) with the open tag, or with the close tag (the open tag was in
    the prompt). Anything else -- `<thinkX think>code`, or code with no tag at all -- the verifier reads as no
    thinking, yet it is no skip the policy was taught: it earns no `nothink-bonus`."""
    head = text.lstrip()
    return head.startswith(cfg.open) or head.startswith(cfg.close)


def drop_malformed_bonus(r, cfg: ThinkingConfig) -> float:
    """Remove the `nothink-bonus` of every completion that is not well_formed (from r.rewards and r.components).
    -> the share of samples that lost it."""
    if BONUS not in r.components:
        return 0.0
    bad = torch.tensor([not well_formed(t, cfg) for t in r.batch.texts], dtype=torch.bool)  # (N,)
    bonus = r.components[BONUS]  # (N,)
    lost = bad.to(bonus.device) & (bonus != 0)  # (N,)
    r.rewards = r.rewards - torch.where(lost, bonus, torch.zeros_like(bonus)).to(r.rewards)
    r.components[BONUS] = torch.where(lost, torch.zeros_like(bonus), bonus)
    return lost.float().mean().item() if len(lost) else 0.0


MALFORMED = "malformed-opening"
"""r.components key of the malformed-opening penalty (rewards.malformed_opening_penalty)."""


def penalise_malformed(r, cfg: ThinkingConfig, penalty: float) -> float:
    """Subtract `penalty` from the reward of every completion that is not well_formed (r.rewards; the weighted
    share in r.components[MALFORMED]). -> the share of samples penalised."""
    bad = torch.tensor([not well_formed(t, cfg) for t in r.batch.texts], dtype=torch.float32)  # (N,)
    r.components[MALFORMED] = (-penalty * bad).to(r.rewards)
    r.rewards = r.rewards + r.components[MALFORMED]
    return bad.mean().item() if len(bad) else 0.0


@dataclass
class ForcedBatch(SampleBatch):
    """A SampleBatch whose samples start with a forced prefix (part of `tokens`, `texts` and `n_tokens`), or, the
    free share of each group, are sampled as the policy would."""
    forced_nothink: torch.Tensor | None = None
    """(N,) bool: the sample was forced to start with the empty block."""
    prefix_len: torch.Tensor | None = None
    """(N,) long: tokens of the sample's path prefix at the start of `tokens` (0 for a free sample off both)."""
    path: torch.Tensor | None = None
    """(N,) long: 0 the empty-block path, 1 the open-tag path, 2 neither (a free sample: a malformed opening)."""
    free: torch.Tensor | None = None
    """(N,) bool: sampled freely (no forced prefix)."""
    counts: tuple[int, int, int] = (0, 0, 0)
    """Samples of every group: (forced no-think, forced think, free): the stratified proposal of `is_weights`."""
    forced: torch.Tensor | None = None
    """(N, T) bool: the token was forced (no sampling drew it); `behaviour_logprobs` keeps it out of the
    off-policy correction, whose job the importance weights `is_weights` already do for the forced prefix."""
    nested_len: int = 0
    """> 0: the open tag's ids (this many) are a prefix of the empty block's (single-token tags: `<think>` then
    `</think>`), so a forced-think sample that closes at once is an empty block too (`is_weights`)."""


def tag_ids(tokenizer, text: str) -> list[int]:
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not ids:
        raise CodechatError(f"verifier.thinking: the tag {text!r} encodes to no tokens")
    return ids


class BalancedSampler:
    """A rollout engine whose groups are round(free_frac*G) free samples, then of the rest round(f*rest) forced
    no-think samples and the others forced think samples."""

    def __init__(self, engine, tokenizer, cfg: ThinkingConfig, pad_id: int = 0):
        if not 0 < cfg.forced_nothink_frac < 1:
            raise CodechatError(f"verifier.thinking.forced_nothink_frac: expected in (0, 1), "
                                f"got {cfg.forced_nothink_frac}")
        if not 0 <= cfg.free_frac < 1:
            raise CodechatError(f"verifier.thinking.free_frac: expected in [0, 1), got {cfg.free_frac}")
        self.engine, self.cfg = engine, cfg
        self.pad_id = pad_id  # fills the rows' padding (the policy tokenizer's pad id)
        self.nothink_text, self.think_text = cfg.open + cfg.close, cfg.open
        # each prefix encoded whole, as the tokenizer encodes it in SFT text (`<think></think>` may merge into
        # tokens such as `></`): the path the model learns from its SFT data is the one forced and weighted
        self.nothink_ids = tag_ids(tokenizer, self.nothink_text)
        self.think_ids = tag_ids(tokenizer, self.think_text)
        self.shared = next((i for i, (a, b) in enumerate(zip(self.nothink_ids, self.think_ids)) if a != b),
                           min(len(self.nothink_ids), len(self.think_ids)))
        """Leading forced tokens common to both prefixes (the open tag's start): forced in every forced sample, no
        choice of the policy there, so masked out of their loss; the mode choice is the first token after them."""
        if self.think_ids[:len(self.nothink_ids)] == self.nothink_ids:
            raise CodechatError(f"verifier.thinking: the empty block {self.nothink_text!r} encodes to a prefix of the "
                                f"open tag {self.think_text!r}'s tokens; no think sample could be told from it")
        self.nested_len = len(self.think_ids) if self.shared == len(self.think_ids) else 0
        """The open tag's length when its ids begin the empty block's (else 0): ForcedBatch.nested_len."""

    @property
    def samples_training_weights(self) -> bool:
        return self.engine.samples_training_weights

    def update_weights(self, model) -> None:
        self.engine.update_weights(model)

    def close(self) -> None:
        self.engine.close()

    def split(self, n: int) -> tuple[int, int, int]:
        """-> (forced no-think, forced think, free) samples of a group of n (at least one forced sample)."""
        u = min(max(round(self.cfg.free_frac * n), 0), n - 1)
        k = min(max(round(self.cfg.forced_nothink_frac * (n - u)), 0), n - u)
        return k, n - u - k, u

    def path_of(self, ids: list[int]) -> tuple[int, int]:
        """A free sample's (path, prefix length): 0 it opens with the empty block, 1 with the open tag (and not
        the empty block), 2 neither (prefix 0)."""
        if ids[:len(self.nothink_ids)] == self.nothink_ids:
            return 0, len(self.nothink_ids)
        if ids[:len(self.think_ids)] == self.think_ids:
            return 1, len(self.think_ids)
        return 2, 0

    def sample(self, prompts: list[list[int]], n: int, cfg) -> SampleBatch:
        k, m, u = self.split(n)
        parts = []  # (batch, prefix ids, prefix text, path forced (None: free), samples per prompt)
        for count, ids, text, path in ((k, self.nothink_ids, self.nothink_text, 0),
                                       (m, self.think_ids, self.think_text, 1), (u, [], "", None)):
            if count:
                b = self.engine.sample([p + ids for p in prompts], count, cfg)
                parts.append((b, ids, text, path, count))
        q = {0: k / n, 1: m / n}  # the stratified share of each forced path
        tok, lp, pidx, fin, texts, ntok, paths, plen, free, masks, strata, n_forced = [], [], [], [], [], [], [], [], [], [], [], []
        for pi in range(len(prompts)):
            for b, ids, text, path, count in parts:
                for j in range(pi * count, (pi + 1) * count):
                    nt = int(b.n_tokens[j])
                    gen = b.tokens[j, :nt].tolist()
                    tok.append(ids + gen)
                    if path is None:  # free: the engine's log-probs, every token the policy's choice
                        lp.append(b.logprobs[j, :nt].tolist())
                        p, pl = self.path_of(gen)
                        masks.append(0)
                    else:  # the behaviour log-prob of the prefix: log q on its first token (the rest certain)
                        lp.append([math.log(q[path])] + [0.0] * (len(ids) - 1) + b.logprobs[j, :nt].tolist())
                        p, pl = self.path_of(ids + gen)  # by its tokens: a forced open tag closed at once is empty
                        masks.append(len(ids) if self.cfg.mask_forced else self.shared)
                    pidx.append(pi)
                    fin.append(b.finish_reason[j])
                    texts.append(text + b.texts[j])
                    ntok.append(nt + len(ids))
                    paths.append(p)
                    plen.append(pl)
                    free.append(path is None)
                    strata.append(path == 0)
                    n_forced.append(len(ids))
        # a forced sample's first masks[i] tokens (the shared forced ones): context, not learned
        row_masks = [[0.0] * masks[i] + [1.0] * (len(t) - masks[i]) for i, t in enumerate(tok)]
        tokens, mask, logprobs = pad_rows(tok, self.pad_id, row_masks, lp)  # (N, T)
        forced = torch.zeros(tokens.shape, dtype=torch.bool)  # (N, T)
        for i in range(len(tok)):
            forced[i, :n_forced[i]] = True
        path_t, free_t = torch.tensor(paths), torch.tensor(free)
        return ForcedBatch(torch.tensor(pidx), tokens, mask, logprobs, fin, texts, torch.tensor(ntok),
                           forced_nothink=torch.tensor(strata), prefix_len=torch.tensor(plen), path=path_t,
                           free=free_t, counts=(k, m, u), forced=forced, nested_len=self.nested_len)


def behaviour_logprobs(batch, rows: torch.Tensor, sampler_logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """(n, T) the behaviour log-probs an off-policy correction compares pi_old with, for batch rows `rows`:
    the sampler's, except on a ForcedBatch's forced tokens, which take pi_old's own (ratio 1). No sampler drew a
    forced token, so its recorded 0 (or log q) is no behaviour probability: against it `icepop` would mask the
    forced empty block and a capped `tis` weigh it by pi_old; the proposal is `is_weights`' to correct."""
    forced = getattr(batch, "forced", None)
    if forced is None:
        return sampler_logp
    f = forced[rows.to(forced.device)].to(sampler_logp.device)  # (n, T)
    return torch.where(f, old_logp.detach().to(sampler_logp.dtype), sampler_logp)


def prefix_logprob(logp: torch.Tensor, prefix_len: torch.Tensor) -> torch.Tensor:
    """(N,) detached log pi_theta(prefix): logp (N, T) the policy's log-probs of the sampled tokens, prefix_len (N,)."""
    in_prefix = torch.arange(logp.shape[1])[None, :] < prefix_len[:, None]  # (N, T)
    return (logp.detach().cpu() * in_prefix).sum(dim=1)  # (N,)


def is_weights(logp: torch.Tensor, prefix_len: torch.Tensor, path: torch.Tensor,
               counts: tuple[int, int, int], nested_len: int = 0) -> torch.Tensor:
    """(N,) detached importance weights pi_theta(path) / q(path) of a stratified group: counts = (k forced to the
    empty block, m forced to the open tag, u free) of n = k + m + u, path (N,) as ForcedBatch.path. The proposal
    of a path is the mixture its samples are drawn from (the balance heuristic of multiple importance sampling):

        q(empty) = (k + u pi(empty)) / n      q(open) = (m + u pi(open)) / n      q(neither) = u pi(neither) / n

    so every sample on a path has the same weight, forced or free, and a free sample off both paths weighs n / u
    (exact for any pi: E_q[w f] = E_pi[f] over all openings when u > 0; over the two paths when u = 0).
    nested_len > 0 (the open tag's first nested_len ids begin the empty block): the forced-open stratum reaches
    the empty block too, with probability pi(empty) / pi(open), so q(empty) = (k + m pi(empty) / pi(open)
    + u pi(empty)) / n. In general w(y) = n / sum_s c_s 1[y starts with s's prefix] / pi(s's prefix)."""
    k, m, u = counts
    n = k + m + u
    pi = prefix_logprob(logp, prefix_len).exp()  # (N,) pi(path prefix); 1 for path 2 (an empty prefix)
    forced = torch.where(path == 0, torch.tensor(float(k)), torch.where(path == 1, torch.tensor(float(m)),
                                                                        torch.tensor(0.0)))  # (N,)
    if nested_len > 0:  # an empty block is also a forced open tag's sample that closed at once
        pi_open = prefix_logprob(logp, torch.full_like(prefix_len, nested_len)).exp()  # (N,)
        forced = forced + torch.where(path == 0, m * pi / pi_open.clamp(min=1e-30), torch.tensor(0.0))
    q = (forced + u * pi) / n  # (N,) > 0: a path has forced samples or free ones that took it
    return pi / q


def recenter(adv: torch.Tensor, w: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(N,) weighted advantages w * (adv - b_g), b_g = sum_g w adv / sum_g w the weighted mean of each group g: the
    weighted advantages of a group sum to 0. Tokens no sample of the group chose then get no push at a position
    all its samples share (the choice token after the shared forced ones): with sum w A != 0 every unsampled
    token there moves by -(sum w A) pi(token) -- the drift that gave `<thinkerthink>` openings (docs/thinking.md)."""
    out = torch.empty_like(adv)
    for g in torch.unique(groups):
        sel = groups == g  # (N,)
        wg, ag = w[sel], adv[sel]
        out[sel] = wg * (ag - (wg * ag).sum() / wg.sum().clamp(min=1e-12))
    return out


def check_thinking(cfg) -> None:
    """Config checks of a RunConfig's thinking settings: a setting that would do nothing is an error."""
    t, rw = cfg.verifier.thinking, cfg.rewards
    if t.enabled and (not t.open or not t.close or t.open == t.close):
        raise CodechatError(f"verifier.thinking: open and close must be two different non-empty tags, "
                            f"got open={t.open!r} close={t.close!r}")
    if BONUS in rw.components and not t.enabled:
        raise CodechatError("rewards: nothink-bonus needs verifier.thinking.enabled=true (else no answer thinks)")
    if not 0 <= t.forced_nothink_frac < 1:
        raise CodechatError(f"verifier.thinking.forced_nothink_frac: expected in [0, 1), got {t.forced_nothink_frac}")
    if not (math.isfinite(rw.malformed_opening_penalty) and rw.malformed_opening_penalty >= 0):
        raise CodechatError(f"rewards.malformed_opening_penalty: expected >= 0, got {rw.malformed_opening_penalty}")
    if rw.malformed_opening_penalty > 0 and not t.enabled:
        raise CodechatError("rewards.malformed_opening_penalty > 0 needs verifier.thinking.enabled=true")
    if t.forced_nothink_frac > 0 and not t.enabled:
        raise CodechatError("verifier.thinking.forced_nothink_frac > 0 needs verifier.thinking.enabled=true")
    if t.forced_nothink_frac > 0 and cfg.rl.zero_variance == "resample":
        raise CodechatError("verifier.thinking.forced_nothink_frac > 0 is not combined with rl.zero_variance=resample")
    if not (math.isfinite(t.is_weight_floor) and t.is_weight_floor >= 0):
        raise CodechatError(f"verifier.thinking.is_weight_floor: expected >= 0, got {t.is_weight_floor}")
    if t.is_weight_floor > 0 and t.forced_nothink_frac == 0:
        raise CodechatError("verifier.thinking.is_weight_floor > 0 needs forced_nothink_frac > 0 (no forced samples)")
    if t.forced_nothink_frac > 0 and cfg.rl.async_steps > 0:  # the producer samples without the BalancedSampler
        raise CodechatError("verifier.thinking.forced_nothink_frac > 0 is not combined with rl.async_steps > 0 "
                            "(the async producer samples freely; use rl.async_steps=0)")
    if t.forced_nothink_frac > 0 and is_repo_spec(cfg.data.train):  # episodes: no one first answer token to force
        raise CodechatError(f"verifier.thinking.forced_nothink_frac > 0 is for single answers, not repository "
                            f"episodes (data.train={cfg.data.train})")
    if not (math.isfinite(rw.nothink_margin) and rw.nothink_margin >= 0):
        raise CodechatError(f"rewards.nothink_margin: expected >= 0, got {rw.nothink_margin}")
    if not (math.isfinite(rw.nothink_lr) and rw.nothink_lr >= 0):
        raise CodechatError(f"rewards.nothink_lr: expected >= 0, got {rw.nothink_lr}")
    if rw.nothink_ref_steps < 1:
        raise CodechatError(f"rewards.nothink_ref_steps: expected >= 1, got {rw.nothink_ref_steps}")
    if not (math.isfinite(t.opening_loss) and t.opening_loss >= 0):
        raise CodechatError(f"verifier.thinking.opening_loss: expected >= 0, got {t.opening_loss}")
    if t.opening_loss > 0 and not t.enabled:
        raise CodechatError("verifier.thinking.opening_loss > 0 needs verifier.thinking.enabled=true")
    if not (math.isfinite(t.free_frac) and 0 <= t.free_frac < 1):
        raise CodechatError(f"verifier.thinking.free_frac: expected in [0, 1), got {t.free_frac}")
    if t.free_frac > 0 and t.forced_nothink_frac == 0:
        raise CodechatError("verifier.thinking.free_frac > 0 needs forced_nothink_frac > 0 (without forcing every "
                            "sample is free)")

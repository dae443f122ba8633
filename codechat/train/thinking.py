"""The RL loop's thinking hooks (rollout/thinking.py has the pieces): wrap the engine for balanced sampling, log
per-mode metrics, apply the nothink-bonus constraint, importance-weight the advantages of forced samples.

    hooks = ThinkingHooks(ctx)                        # evaluates the starting policy: the difficulty reference
    engine = hooks.wrap(engine)                       # forced_nothink_frac > 0: BalancedSampler
    metrics |= hooks.after_sample(r, logprobs_fn)     # thinking/ metrics; lambda from the policy's pass rate
    adv, m = hooks.weigh(r, adv, logprobs_fn)         # w (adv - weighted group mean); logprobs_fn(r, rows)
    m = hooks.opening_grad(model, r, rows, temp)      # opening_loss > 0: its gradient added, once per optimizer step
Everything is a no-op with verifier.thinking off.
"""
from __future__ import annotations

import dataclasses

import torch

from codechat.evaluation.evaluate import evaluate_policy
from codechat.evaluation.thinking import reference_rates
from codechat.policy.fsdp import full_weights
from codechat.rollout.thinking import BONUS, BalancedSampler, ForcedBatch, NothinkConstraint, drop_malformed_bonus, \
    is_weights, penalise_malformed, prefix_logprob, recenter, tag_ids, thinking_metrics
from codechat.train import dist
from codechat.train.opening import opening_loss

REF_RATES = "thinking_ref_rates"
"""state.extra key: {task_id: pass rate} of the policy at the RL stage start on the eval set (checkpointed)."""


class ThinkingHooks:
    def __init__(self, ctx):
        self.cfg = ctx.cfg.verifier.thinking
        self.tokenizer = ctx.policy.tokenizer
        self.constraint = None
        if self.cfg.enabled and BONUS in ctx.cfg.rewards.components:
            self.constraint = NothinkConstraint(ctx.cfg.rewards)
            self.constraint.load_state_dict(ctx.state.extra.get("nothink", {}))
        self.penalty = ctx.cfg.rewards.malformed_opening_penalty
        self.state = ctx.state
        self.opening_coef = self.cfg.opening_loss if self.cfg.enabled else 0.0
        self.paths = [tag_ids(self.tokenizer, t) for t in (self.cfg.open + self.cfg.close, self.cfg.open,
                                                            self.cfg.close)] if self.opening_coef > 0 else []
        """The well-formed openings, each encoded whole (as BalancedSampler forces them): train/opening.py."""
        self.pending = self.reference_eval(ctx)  # logged with the first step
        self._weights = None  # (batch, (logp, w)): the last ForcedBatch's weights, shared by the two hooks

    def reference_eval(self, ctx) -> dict[str, float]:
        """Once per run (a resume finds the rates in the checkpoint): evaluate the policy at the RL stage start
        on the eval set with the eval settings; its per-task pass rates are the difficulty buckets of every later
        eval (evaluation/thinking.py). -> its metrics as ref_eval/... (the "before" numbers)."""
        if not self.cfg.enabled or not ctx.eval_tasks or REF_RATES in ctx.state.extra:
            return {}
        e = ctx.cfg.eval
        with full_weights(ctx.policy.model):  # FSDP: sample from gathered weights (every rank evaluates)
            rep = evaluate_policy(ctx.policy, ctx.verifier, ctx.eval_tasks, n=max(e.n, 1), ks=[1],
                                  temperature=e.temperature, greedy=e.greedy, sampling=ctx.cfg.sampling,
                                  seed=ctx.cfg.seed + 99, thinking=True)
        ctx.state.extra[REF_RATES] = reference_rates(rep.per_task)
        return {f"ref_eval/{k}": v for k, v in rep.metrics.items()
                if k.startswith(("pass@", "thinking/")) or k in ("greedy_pass@1", "mean_len")}

    def wrap(self, engine):
        if self.cfg.enabled and self.cfg.forced_nothink_frac > 0:
            return BalancedSampler(engine, self.tokenizer, self.cfg, self.tokenizer.pad_token_id or 0)
        return engine

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def after_sample(self, r, prefix_logprobs=None) -> dict[str, float]:
        """prefix_logprobs (as `weigh`'s): on a balanced batch the constraint reads the policy's pass rate, the
        importance-weighted mean sum w passed / sum w, not the forced strata's (which hold it still while the
        policy's own answers fail); without it a balanced batch's constraint is refused."""
        if not self.cfg.enabled:
            return {}
        m = thinking_metrics(r, self.cfg, self.count_tokens) | self.pending
        self.pending = {}
        if self.constraint is not None:
            m["thinking/bonus_dropped_malformed"] = drop_malformed_bonus(r, self.cfg)  # before the scale: no bonus
            passed = r.passed.float().cpu()  # (N,)
            w = torch.ones_like(passed)  # (N,) free sampling: every sample is the policy's
            if isinstance(r.batch, ForcedBatch):
                if prefix_logprobs is None:
                    raise ValueError("ThinkingHooks.after_sample: a balanced batch needs prefix_logprobs")
                w = self.weights(r, prefix_logprobs)[1].cpu()
            num, den = dist.all_items((w * passed).tolist()), dist.all_items(w.tolist())  # every rank's samples
            pass_t = sum(num) / max(sum(den), 1e-12)
            m["thinking/policy_pass"] = pass_t
            m.update(self.constraint.apply(r, pass_t))
            self.state.extra["nothink"] = self.constraint.state_dict()  # saved with the next checkpoint
        if self.penalty:  # after the constraint's rescaling: the penalty is not the bonus, lambda leaves it alone
            m["thinking/malformed_penalised"] = penalise_malformed(r, self.cfg, self.penalty)
        return m

    def weights(self, r, prefix_logprobs) -> tuple[torch.Tensor, torch.Tensor]:
        """A ForcedBatch's (N, T) policy log-probs and (N,) exact importance weights (computed once per batch)."""
        if self._weights is not None and self._weights[0] is r.batch:
            return self._weights[1]
        b = r.batch
        # every real token, the masked forced ones too: the weight needs pi of the whole prefix
        every = (torch.arange(b.mask.shape[1])[None, :] < b.n_tokens[:, None]).to(b.mask.dtype)  # (N, T)
        full = dataclasses.replace(r, batch=dataclasses.replace(b, mask=every))
        logp = prefix_logprobs(full, torch.arange(len(r.verdicts)))  # (N, T)
        out = logp, is_weights(logp, b.prefix_len, b.path, b.counts, b.nested_len)
        self._weights = (b, out)
        return out

    def weigh(self, r, adv: torch.Tensor, prefix_logprobs) -> tuple[torch.Tensor, dict[str, float]]:
        """adv (N,) -> recenter(adv, w) (N,) for a ForcedBatch: w = max(pi(path) / q(path), is_weight_floor), the
        weighted advantages of each group summing to 0; prefix_logprobs(r, rows) -> (N, T) no-grad policy log-probs
        of r's rows (given r with a mask over every real token, the masked forced ones included)."""
        b = r.batch
        if not isinstance(b, ForcedBatch):
            return adv, {}
        logp, w = self.weights(r, prefix_logprobs)
        w = w.to(adv.device)  # (N,)
        m = {}
        on_empty = b.path == 0  # (N,) forced or free: the policy's own probability of the empty block
        if on_empty.any():
            m["thinking/policy_nothink_p"] = prefix_logprob(logp[on_empty], b.prefix_len[on_empty]).exp().mean().item()
        if b.free.any():  # free samples whose tokens take neither forced path (the same text as other tokens too)
            m["thinking/offpath_frac"] = (b.path[b.free] == 2).float().mean().item()
            free = [t for t, f in zip(b.texts, b.free.tolist()) if f]  # and those whose text is malformed
            m["thinking/malformed_frac"] = sum(not t.lstrip().startswith(self.cfg.open) for t in free) / len(free)
        w = w.clamp(min=self.cfg.is_weight_floor)  # (N,) is_weight_floor 0: exact
        m.update({"thinking/is_weight_mean": w.mean().item(), "thinking/is_weight_max": w.max().item(),
                  "thinking/is_weight_floored": (w == self.cfg.is_weight_floor).float().mean().item()
                  if self.cfg.is_weight_floor > 0 else 0.0})
        return recenter(adv, w, b.prompt_index.to(adv.device)), m

    def opening_grad(self, model, r, rows: torch.Tensor, temperature: float) -> dict[str, float]:
        """opening_loss > 0: backward of opening_loss * the opening-tag loss of r's rows (train/opening.py), into
        the gradient of the optimizer step being accumulated. -> its metrics ({} when off or no rows)."""
        if self.opening_coef <= 0 or len(rows) == 0:
            return {}
        b = r.batch
        loss, m = opening_loss(model, r.prompts, b.prompt_index[rows], b.tokens[rows], b.n_tokens[rows],
                               self.paths, temperature)
        (self.opening_coef * loss).backward()
        return m

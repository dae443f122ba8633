"""The batched KV-cache sampler: P prompts x n samples, each prompt prefilled once and its KV shared by its n
samples; temperature, top-k, top-p, stop strings and EOS, per-sequence early stop, seeded.

Recorded log-probs are those of the distribution actually sampled from: logits / temperature, then top-k (ties
with the k-th logit are kept, as in transformers), then top-p truncation (tokens outside the nucleus get
probability 0, the rest are renormalised), then log-softmax at the chosen token. So at temperature 1 without
top-k/top-p they equal the model's log-probs (what `completion_logprobs` computes); at temperature T != 1 they
equal `completion_logprobs(..., temperature=T)` only without truncation; truncation raises them
(renormalisation). Greedy (temperature 0) records the model's
untempered, untruncated log-prob of the argmax token.

Stops: a sample ends at an EOS token (the policy's eos ids; the token is kept, mask 1, not in the text) or when
its text contains a stop string (the token that completed it is the last one; the text is cut just after the
stop string, which is kept), else at its own budget: max_new_tokens (or its row's entry of `max_new`) or the
model's context after its own prompt, whichever comes first ('length'); a long prompt never shortens another
row's budget. Decoding stops when every sample has finished, and finished rows are dropped from the batch as they
accumulate. `sample(..., on_finish=fn)` calls fn(row, text) once per sample the moment it finishes (a 'length'
sample after the last step), from the decoding thread, with the text the batch will hold: a verifier can start
on it while the other rows keep decoding.

Growing contexts: `sample(contexts, 1, cfg, keys=[...])` (one key per context, e.g. an episode) reuses the KV
the previous keyed call left for each key and prefills only the appended tokens (policy/prefix.py; lean decoder
only). Tokens are the same as without keys; log-probs agree to float rounding.

Reproducible: a `torch.Generator` seeded with `cfg.seed` draws one uniform per sample per token index
(inverse-CDF sampling), so a sample's tokens depend on the seed, its index and the model's logits only - not on
which other rows share the batch, nor on when finished rows are dropped, nor on when the sample started.

Continuous batching (`max_rows`, config `rollout.max_rows`): at most max_rows rows are decoded at once; when a
group's worth of slots is free (min(n, max_rows)), the next prompt is prefilled alone and its samples join the
batch, attending to their own prompt and to generated-cache columns from their start on (`SharedCache.gstart`).
The samples equal the static batch's for the same seed (the same uniforms per sample and token index), up to
float rounding: a prompt prefilled alone rather than left-padded among others gives logits ~1e-6 apart, which
can flip a token only where a uniform lands within that of a CDF boundary (tested: identical tokens, log-probs
within 1e-4). The fast decoder only (Llama family); with transformers' forward max_rows is ignored (static).
The generated-cache columns grow by the budget when late rows need them (no column reuse).

Compiled steps (`cfg.compile`, config `sampling.compile`): the per-row cache's steps run as a torch.compile'd
static-shape graph (policy/staticstep.py); finished rows are then dropped in whole power-of-two buckets. Same
tokens as eager; not with continuous batching.

    sampler = Sampler(policy); batch = sampler.sample([policy.encode_prompt("def add(a, b):")], 4, cfg)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from codechat import CodechatError
from codechat.config import SamplingConfig
from codechat.policy import cattn
from codechat.policy.context import context_length, new_token_budget
from codechat.policy.decoding import make_decoder
from codechat.policy.fsdp import full_weights
from codechat.policy.prefix import PrefixEntry, PrefixStore, weights_version
from codechat.policy.stops import StopChecker


@dataclass
class SampleBatch:
    prompt_index: torch.Tensor
    """(N,) long: the prompt each sample came from; the n samples of a prompt are contiguous."""
    tokens: torch.Tensor
    """(N, T) long: each row's tokens after its prompt, right-padded with the pad id; T = the longest row. A
    single answer's row is its new tokens; an episode's is its model turns and tool results in order."""
    mask: torch.Tensor
    """(N, T) float: the loss mask, 1 exactly on the tokens the policy sampled (the final EOS/stop token
    included); 0 on padding, on an episode's tool results and on a forced sample's shared forced prefix."""
    logprobs: torch.Tensor
    """(N, T) float: log-prob of each sampled token under the distribution it was sampled from; 0 where mask
    is 0 (a forced prefix's first token: log of its stratum's share)."""
    finish_reason: list[str]
    """Per sample: 'stop' (EOS or stop string) or 'length' (the token budget ran out; an episode: truncated)."""
    texts: list[str]
    """Per sample: decoded row (special tokens dropped), cut just after the stop string; an episode's is its
    model turns with their tool results between them."""
    n_tokens: torch.Tensor
    """(N,) long: each row's length (real tokens, mask holes included: an episode's model and tool-result
    tokens). The tokens the model produced are `mask.sum(-1)` (Rollouts.model_tokens)."""


def pad_rows(rows: list[list[int]], pad_id: int, masks: list[list[float]] | None = None,
             logprobs: list[list[float]] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ragged rows -> tokens (N, T) long right-padded with `pad_id`, mask (N, T) float, logprobs (N, T) float.
    masks: each row's own mask (holes on an episode's tool results or a forced prefix; default 1 on every token
    of the row); logprobs: each row's (default 0). Both are 0 on padding; T = the longest row (at least 1)."""
    T = max((len(r) for r in rows), default=1) or 1
    tokens = torch.full((len(rows), T), int(pad_id), dtype=torch.long)  # (N, T)
    mask = torch.zeros((len(rows), T))  # (N, T)
    lp = torch.zeros((len(rows), T))  # (N, T)
    for i, r in enumerate(rows):
        tokens[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        m = [1.0] * len(r) if masks is None else masks[i]
        mask[i, :len(m)] = torch.tensor(m, dtype=mask.dtype)
        if logprobs is not None:
            lp[i, :len(logprobs[i])] = torch.tensor(logprobs[i], dtype=lp.dtype)
    return tokens, mask, lp


def truncate(logits, cfg: SamplingConfig):
    """Raw logits (B, V) -> float logits of the distribution sampled from: tempered, -inf outside top-k/top-p.
    Greedy (temperature 0) leaves them as they are."""
    logits = logits.float()
    if cfg.temperature <= 0:
        return logits
    if cfg.temperature != 1.0:
        logits = logits / cfg.temperature
    if cfg.top_k and 0 < cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly before each token
        drop_sorted = before >= cfg.top_p  # keep the smallest prefix reaching top_p (always the top token)
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def process_logits(logits, cfg: SamplingConfig):
    """Raw logits (B, V) -> log-probs (B, V) of the distribution sampled from (see module docstring)."""
    return torch.log_softmax(truncate(logits, cfg), dim=-1)


def choose(logits, cfg: SamplingConfig, u, native: bool = False):
    """Truncated logits (B, V) and uniforms u (B,) in [0, 1) -> tokens (B,) and their log-probs (B,). native:
    through cattn.sample_rows (one C pass, the same rule; CPU, cattn.kernel() built)."""
    if cfg.temperature <= 0:
        tok = logits.argmax(-1)
        return tok, logits.gather(1, tok[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
    if native and logits.dtype == torch.float32:
        return cattn.sample_rows(logits.contiguous(), u.float().contiguous())
    # inverse CDF, one uniform per row (torch.multinomial draws an exponential per vocabulary entry)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    cdf = probs.cumsum(-1)  # (B, V); a 0-probability token repeats its predecessor's value exactly
    x = u[:, None] * cdf[:, -1:]  # (B, 1)
    tok = torch.searchsorted(cdf, x, right=True)[:, 0]  # first cdf > x: never a 0-probability token ...
    V = cdf.shape[1]
    if bool((tok == V).any()):  # ... unless x rounded up to the total: take the last token with mass
        last = V - 1 - (probs.flip(-1) > 0).int().argmax(-1)  # (B,)
        tok = torch.where(tok == V, last, tok)
    return tok, probs.gather(1, tok[:, None])[:, 0].log()


def validate(cfg: SamplingConfig) -> None:
    if cfg.temperature < 0 or not 0 < cfg.top_p <= 1 or cfg.top_k < 0 or cfg.max_new_tokens < 1:
        raise CodechatError(f"sampling: need temperature >= 0, 0 < top_p <= 1, top_k >= 0, max_new_tokens >= 1 "
                            f"(got {cfg.temperature}, {cfg.top_p}, {cfg.top_k}, {cfg.max_new_tokens})")


class Sampler:
    """codechat's own rollout engine (policy/engine.py `RolloutEngine`): samples the training model in place."""

    samples_training_weights = True
    """It reads the live training model: nothing to push after an update."""

    def __init__(self, policy, fast: bool | None = None, compact_every: float = 0.25, max_rows: int = 0):
        """fast: None = lean forward when supported (else transformers' forward), False = always transformers'.
        compact_every: drop finished rows once they are this fraction of the batch. max_rows: continuous
        batching, at most this many rows decoded at once (0 = all; see the module docstring)."""
        if max_rows < 0:
            raise CodechatError(f"rollout.max_rows must be >= 0 (0 = all rows at once), got {max_rows}")
        self.policy = policy
        self.fast = fast
        self.compact_every = compact_every
        self.max_rows = max_rows
        self.stops = StopChecker(policy.tokenizer)
        self.prefix = PrefixStore()
        """KV of the last keyed call's contexts and samples, reused by the next keyed call."""

    def update_weights(self, model) -> None:
        """Nothing to do: the next `sample` reads the model's current weights."""

    def close(self) -> None:
        """Nothing to release."""

    def release_kv(self) -> None:
        """Drop the KV kept for keyed contexts (the episodes have ended)."""
        self.prefix.replace({})

    def sample(self, prompts: list[list[int]], n: int, cfg: SamplingConfig,
               on_finish: Callable[[int, str], None] | None = None, keys: list | None = None,
               max_new: list[int] | None = None) -> SampleBatch:
        """keys: None, or one hashable per prompt (n must be 1): reuse and keep KV per key across calls.
        max_new: None (cfg.max_new_tokens for all), or one token budget per prompt (e.g. per episode turn)."""
        validate(cfg)
        if not prompts or any(len(p) == 0 for p in prompts) or n < 1:
            raise CodechatError("sampler: need at least one non-empty prompt and n >= 1")
        check_max_new(max_new, len(prompts))
        if keys is not None and (n != 1 or len(keys) != len(prompts) or len(set(keys)) != len(keys)):
            raise CodechatError("sampler: keys need n = 1 and one distinct key per prompt")
        model = self.policy.model
        was_training = model.training
        model.eval()
        try:
            # FSDP: the trainer gathers once around a whole rollout (this is a fallback); model.compute_dtype:
            # the sampler computes as the trainer does, so their log-probs agree
            with full_weights(model), self.policy.autocast():
                index, out_tok, out_logp, n_tok, reason, texts = self._generate(prompts, n, cfg, on_finish, keys,
                                                                                 max_new)
        finally:
            model.train(was_training)
        # leave inference mode: the trainer indexes and multiplies with these under autograd
        return self._finish(index.clone(), out_tok.clone(), out_logp.clone(), n_tok, reason, texts)

    def _text(self, tokens: torch.Tensor, reason: str, cfg: SamplingConfig) -> str:
        """A finished sample's new tokens (n,) -> its text (special tokens dropped, cut after the stop string)."""
        text = self.policy.decode(tokens)
        return cut_at_stop(text, cfg.stop) if reason == "stop" else text

    @torch.inference_mode()
    def _generate(self, prompts, n, cfg, on_finish=None, keys=None, max_new=None):
        pol, dev = self.policy, self.policy.device
        pad = pol.tokenizer.pad_token_id
        P, N = len(prompts), len(prompts) * n
        ctx = context_length(pol.model)
        room = [new_token_budget(len(p), m, ctx)  # each prompt's own budget, never past the context
                for p, m in zip(prompts, max_new if max_new is not None else [cfg.max_new_tokens] * P)]
        Tn = max(room)  # generated columns: the largest budget
        row_budget = torch.tensor([room[r // n] for r in range(N)] + [Tn], device=dev)  # (N + 1,) scratch last
        dec = make_decoder(pol.model, self.fast, cfg.compile, cfg.packed_weights, cfg.native_kernels)
        keys = keys if keys is not None and dec.reuses_kv else None
        reuse = self.prefix.reusable(keys, prompts, weights_version(pol.model)) if keys else [0] * P
        past = self.prefix.past(keys, reuse, pol.model.get_input_embeddings().weight) if keys else None
        self.prefix.reused_tokens += sum(reuse)
        self.prefix.prefilled_tokens += sum(len(p) - r for p, r in zip(prompts, reuse))
        Lp = max(len(p) - r for p, r in zip(prompts, reuse))
        # keyed calls (KV kept across turns) decode all rows at once: a row's exported KV assumes it started at 0
        slots = self.max_rows if 0 < self.max_rows < N and hasattr(dec, "add") and keys is None else N
        if slots < N:  # rows joining mid-decode change the batch at every admission: no static shapes
            dec.compiled = False
        queue = [(p, g0, min(g0 + slots, n)) for p in range(P) for g0 in range(0, n, slots)]  # (prompt, samples)
        first = []  # the admissions decoded from the start: as many as fit the slots
        while queue and sum(g1 - g0 for _, g0, g1 in first) + queue[0][2] - queue[0][1] <= slots:
            first.append(queue.pop(0))
        ids = torch.full((len(first), Lp), pad, dtype=torch.long)
        valid = torch.zeros(len(first), Lp, dtype=torch.bool)
        for i, (p, _, _) in enumerate(first):  # left padding; only what the past does not hold
            q, r = prompts[p], reuse[p]
            ids[i, Lp - len(q) + r:] = torch.tensor(q[r:], dtype=torch.long)
            valid[i, Lp - len(q) + r:] = True
        ids, valid = ids.to(dev), valid.to(dev)
        index = torch.cat([torch.full((g1 - g0,), i, dtype=torch.long) for i, (_, g0, g1) in enumerate(first)]).to(dev)
        rows = torch.cat([torch.arange(p * n + g0, p * n + g1) for p, g0, g1 in first]).to(dev)  # (B,) output row
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        # the sampling math in C (cattn.sample_rows) where the C functions build
        native = cfg.native_kernels and torch.device(dev).type == "cpu" and cattn.kernel() is not None
        eos = torch.tensor(pol.eos_token_ids or [-1], device=dev)
        stop_state = self.stops.start(N, cfg.stop)

        logits = dec.prefill(ids, valid, index, Tn, past)  # (B, V)
        out_tok = torch.full((N + 1, Tn), pad, dtype=torch.long, device=dev)  # row N: scratch for rows that
        out_logp = torch.zeros(N + 1, Tn, device=dev)  # finished but are still in the batch
        n_tok = [0] * N
        reason = ["length"] * N
        texts: list[str | None] = [None] * N
        kept: dict = {}  # key -> PrefixEntry, filled as keyed rows finish

        def store_kv(b: int, r: int) -> None:  # batch row b (output row r) is final: store its KV for the next call
            if keys is not None:
                n_fed = n_tok[r] - 1  # the last sampled token was never fed
                kept[keys[r]] = PrefixEntry(list(prompts[r]) + out_tok[r, :n_fed].tolist(), dec.export(b, n_fed))

        def finished(r: int) -> None:  # row r's tokens are final: its text, then the caller hears of it
            texts[r] = self._text(out_tok[r, : n_tok[r]], reason[r], cfg)
            if on_finish is not None:
                on_finish(r, texts[r])

        # one uniform per sample and token index, whatever the batch holds: tokens do not depend on batching;
        # row j of U is drawn when a row first needs its j-th token, so U is the static batch's draw order
        U = torch.empty(0, N + 1, device=dev)  # (J, N + 1)
        tidx = torch.zeros(rows.numel(), dtype=torch.long, device=dev)  # (B,) token index of each batch row
        while True:
            need = int(tidx.max()) + 1 if tidx.numel() else 0
            while U.shape[0] < need:
                U = torch.cat([U, torch.rand(1, N + 1, generator=gen, device=dev)])
            u = U[tidx, rows]  # (B,)
            tok, logp = choose(truncate(logits, cfg), cfg, u, native)  # (B,), (B,)
            out_tok[rows, tidx] = tok
            out_logp[rows, tidx] = logp
            rows_list = rows.tolist()
            stop = torch.isin(tok, eos)  # (B,) EOS, or a stop string completed
            if stop_state is not None:
                stop |= torch.tensor(self.stops.update(stop_state, rows_list, tok.tolist()), device=dev)
            budget = tidx == row_budget[rows] - 1  # (B,) the last token the row's budget allows
            for b, (r, st, bu, j) in enumerate(zip(rows_list, stop.tolist(), budget.tolist(), tidx.tolist())):
                if r < N:
                    n_tok[r] = j + 1
                    if st:
                        reason[r] = "stop"
                    if st or bu:
                        store_kv(b, r)
                        finished(r)
            rows = rows.masked_fill(stop | budget, N)
            tidx = tidx.masked_fill(rows == N, 0)  # finished rows left in the batch write to the scratch row
            n_live = int((rows < N).sum())
            if n_live == 0 and not queue:
                break
            refill = bool(queue) and slots - n_live >= min(n, slots)  # continuous batching: slots to refill
            if refill or rows.numel() - n_live >= max(1, self.compact_every * rows.numel()):
                live = rows < N
                keep = live.nonzero()[:, 0]
                n_keep = n_live if refill else dec.rows_for(n_live)  # a static-shape step keeps whole buckets
                if n_keep > n_live:
                    keep = torch.cat([keep, (~live).nonzero()[: n_keep - n_live, 0]]).sort().values
                if keep.numel() < rows.numel():
                    dec.select(keep)
                    rows, tok, tidx = rows[keep], tok[keep], tidx[keep]
            if hasattr(dec, "columns") and dec.t >= dec.columns:  # rows added late run past the first budget
                dec.grow(Tn)
            logits = [dec.step(tok)] if rows.numel() else []  # (B, V)
            tidx = tidx + 1
            while refill and queue and queue[0][2] - queue[0][1] <= slots - rows.numel():
                p, g0, g1 = queue.pop(0)  # the next prompt's samples take the free slots, from the next column on
                pid = torch.tensor([prompts[p]], dtype=torch.long, device=dev)
                logits.append(dec.add(pid, torch.ones_like(pid, dtype=torch.bool), g1 - g0))  # (g1 - g0, V)
                rows = torch.cat([rows, torch.arange(p * n + g0, p * n + g1, device=dev)])
                tidx = torch.cat([tidx, torch.zeros(g1 - g0, dtype=torch.long, device=dev)])
            logits = logits[0] if len(logits) == 1 else torch.cat(logits)  # (B, V); one part: no copy
        if keys is not None:
            self.prefix.replace(kept)
        index = torch.arange(P, device=dev).repeat_interleave(n)  # (N,) output rows are prompt-contiguous
        return index, out_tok[:N], out_logp[:N], torch.tensor(n_tok, dtype=torch.long), reason, texts

    def _finish(self, index, out_tok, out_logp, n_tok, reason, texts) -> SampleBatch:
        T = max(1, int(n_tok.max()))
        n_dev = n_tok.to(out_tok.device)
        mask = (torch.arange(T, device=out_tok.device)[None] < n_dev[:, None]).float()  # (N, T)
        tokens = out_tok[:, :T].masked_fill(mask == 0, self.policy.tokenizer.pad_token_id)
        logprobs = out_logp[:, :T] * mask
        return SampleBatch(prompt_index=index, tokens=tokens, mask=mask, logprobs=logprobs,
                           finish_reason=reason, texts=texts, n_tokens=n_dev)


def check_max_new(max_new: list[int] | None, n_prompts: int) -> None:
    if max_new is not None and (len(max_new) != n_prompts or any(int(m) < 1 for m in max_new)):
        raise CodechatError(f"sampler: max_new needs one budget >= 1 per prompt (got {list(max_new)} for "
                            f"{n_prompts} prompts)")


def cut_at_stop(text: str, stops: list[str]) -> str:
    """Cut `text` just after the earliest stop string (kept); unchanged when none occurs."""
    ends = [text.find(s) + len(s) for s in stops if s and s in text]
    return text[: min(ends)] if ends else text

"""Asynchronous rollouts (`rl.async_steps = k >= 1`): a producer thread samples and verifies the next k batches
while the trainer updates on the current one, so a step costs about max(sample + verify, update) instead of the sum.

    producer = AsyncProducer(ctx, k)      # the first batch is sampled now, with the starting weights
    r, extra = producer.next_batch()      # batch s (sampled with the weights after update s - k, or the first);
                                          # at once submits batch s + k with the current weights
    ... update ...                        # meanwhile the producer samples

The producer has its own copy of the policy model: the trainer never waits for it to finish with the weights,
and it never sees a half-updated model. Each submission carries a snapshot of the trainer's weights (an in-memory
state_dict copy, no disk round trip) and the policy version (RL updates done so far in this stage); every batch
comes back with that version, and the trainer logs the staleness (its version minus the batch's). A batch more
than k versions old cannot occur: batch s + k is submitted when the trainer takes batch s, with the weights of
version s, and a resume restores the queue only at the step and data position it was saved at. The
behaviour log-probs are the sampler's (`batch.logprobs`), which `algo.correction` with `algo.tis_cap` corrects.
With k = 1 the run is exactly the synchronous loop sampling with weights one update behind (samples, losses,
gradients: tests/test_async_reference.py, bench/async_reference.py); what staleness costs in quality is measured
in docs/scaling.md (a smaller lr than the synchronous loop's removes it on the demo workload).

Data order and seeds are the synchronous loop's: batch s takes the same prompts at the same data position with
the seed of step s, so batch 0 equals the synchronous run's. `state.data_pos` counts the prompts the trainer has
consumed. A checkpoint waits for the batches in flight and saves them (rollouts, versions, data positions) in
trainer.pt (`state_dict`); `--resume` puts them back in the queue, so the resumed run trains on the very batches,
sampled with the very weights, of the uninterrupted run: exact, as for async_steps 0 (tested). Where they cannot
be restored (several ranks: trainer.pt holds rank 0's only; a changed async_steps), the producer restarts from
`state.data_pos` with the checkpoint's weights: no prompt lost or repeated, the versions count on from the
checkpoint's step, and only the first k batches after the resume are fresher than they would have been.
Repository tasks go through the producer too: its copy of the model acts in the G multi-turn episodes per task
(train/episodes.py), tool calls and judgements in the episode runner's threads, while the trainer updates; the
episode metrics come with the batch.

With an engine that holds its own weights (`rollout.engine: vllm`) the producer needs no model copy: the engine
is the behaviour policy. A submission then carries the engine's `snapshot` of the trainer's weights (taken in the
trainer thread), the producer thread loads it into the engine (`load_snapshot`) before sampling the batch, and the
trainer no longer pushes weights after its updates: only the producer thread touches the engine during the stage.
Simplifies: one process's producer (under DDP each rank has its own); no FSDP, no `zero_variance: resample` (its
rounds are collectives); with the `hf` engine the copy doubles the model's memory, with vLLM each batch in flight
holds one snapshot of the weights.

Partial rollouts (`rl.partial_rollouts`, repository tasks): while the trainer waits for a batch it publishes its
newest weights (`publish`); before every batched decode of the episodes the producer loads them when they are
newer than its own (turn boundaries only: a turn is never split), so a long episode is carried over the weight
update and the rest of it is sampled fresher. Each turn records its version (`Turn.version`) and keeps the log-probs
of the weights that sampled it in `batch.logprobs`, so `algo.correction` corrects each segment against its own
behaviour policy; the KV of earlier turns is dropped at the switch (policy/prefix.py: the weights changed), so
later turns attend with the new weights' KV. `async/staleness` stays the batch's starting version (an upper
bound); `async/partial_turns_frac` is the share of model turns sampled with a newer version than that.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from codechat import CodechatError
from codechat.policy.sampler import Sampler
from codechat.rollout.collect import Rollouts
from codechat.train import dist
from codechat.train.common import Context, take
from codechat.train.episodes import episode_metrics, is_repo_batch
from codechat.train.rollouts import collect_rollouts
from codechat.train.probe import GapProbe, ProbeBatch


def check_async(cfg) -> None:
    """Refuse settings the producer cannot honour, naming the field (called before any sampling)."""
    k = cfg.rl.async_steps
    if k < 0:
        raise CodechatError(f"rl.async_steps must be >= 0, got {k}")
    if k == 0:
        if cfg.rl.partial_rollouts:
            raise CodechatError("rl.partial_rollouts needs rl.async_steps >= 1 (a producer beside the trainer)")
        return
    if cfg.rl.zero_variance == "resample":
        raise CodechatError("rl.async_steps > 0 does not support rl.zero_variance=resample (use keep or skip)")
    if dist.world() > 1 and cfg.dist.parallel == "fsdp":
        raise CodechatError("rl.async_steps > 0 does not support dist.parallel=fsdp (use ddp)")


def weights_snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the model's parameters and buffers, safe to read from another thread."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@dataclasses.dataclass
class Batch:
    """One batch submitted to the producer."""

    version: int
    """Policy version that samples it: RL updates done in this stage when its weights were snapshotted."""
    step: int
    """The RL step (of this stage) that trains on it."""
    pos: int
    """Data position of its first prompt."""
    future: Future
    """-> (Rollouts, seconds the producer spent on it, ProbeBatch or None)."""


def own_weights(engine) -> bool:
    """The engine holds its own copy of the weights (vLLM): the producer samples with it directly."""
    return engine is not None and not engine.samples_training_weights


class AsyncProducer:
    def __init__(self, ctx: Context, k: int, saved: dict | None = None, probe: GapProbe | None = None,
                 engine=None):
        """saved: `state_dict()` of the checkpoint being resumed (None: start from state.data_pos). probe: the
        log-prob gap probe, sampled with a due batch's weights (`probe_batch` after `next_batch`). engine: the
        run's rollout engine; one with its own weights (vLLM) is used by the producer thread alone, loaded with
        each batch's snapshot; otherwise (None or the built-in sampler) the producer samples its own model copy."""
        self.ctx, self.k, self.probe = ctx, k, probe
        self.probe_batch: ProbeBatch | None = None
        """The probe completions sampled with the weights of the batch `next_batch` returned last (None: not due)."""
        self.engine = engine if own_weights(engine) else None
        if self.engine is not None:
            self.behaviour = ctx.policy  # tokenizer and prompt encoding only: the engine samples
            self.sampler = self.engine
            self._snapshot, self._load = self.engine.snapshot, self.engine.load_snapshot
        else:
            self.behaviour = dataclasses.replace(ctx.policy, model=copy.deepcopy(ctx.policy.model).eval())
            """The producer's policy: the same tokenizer, its own model copy, loaded from a snapshot per batch."""
            for p in self.behaviour.model.parameters():
                p.requires_grad_(False)
            self.sampler = Sampler(self.behaviour, max_rows=ctx.cfg.rollout.max_rows)
            self._snapshot, self._load = weights_snapshot, self.behaviour.model.load_state_dict
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rollout-producer")
        self.inflight: deque[Batch] = deque()
        self.cursor = ctx.state.data_pos  # next prompt position to submit (state.data_pos: consumed)
        self.next_step = ctx.state.step  # the RL step the next submitted batch is for
        self.lags: dict[int, int] = {}  # version lag -> samples trained at that lag in this stage
        self._idle, self._last_end = 0.0, None  # producer thread: seconds with nothing to do, end of its last batch
        self.partial = ctx.cfg.rl.partial_rollouts
        self._published: tuple[int, dict] | None = None  # (version, weights) the trainer published last (partial)
        self._acting = 0  # version of the weights the producer's model holds
        self.restored = self._restore(saved)
        if not self.inflight:
            self._submit()

    def state_dict(self) -> dict | None:
        """The batches in flight, finished (waits for them), for trainer.pt; None with several ranks (each has
        its own and rank 0 alone writes: a resume samples them again). Waiting is the price of exact resume: an
        unfinished batch was sampled with older weights than the checkpoint's, which the checkpoint does not hold,
        so it can be neither re-sampled exactly on resume nor dropped without changing the run. With k >= 2 each
        checkpoint therefore drains the queue (the trainer idles for up to k batches); keep `checkpoint.every`
        well above k so that cost stays small."""
        if dist.world() > 1:
            return None
        done = []
        for b in self.inflight:
            r, produce_s, pb = b.future.result()
            done.append({"version": b.version, "step": b.step, "pos": b.pos, "rollouts": r, "produce_s": produce_s,
                         "probe": pb})
        return {"k": self.k, "batches": done, "lags": dict(self.lags)}

    def _restore(self, saved: dict | None) -> bool:
        st = self.ctx.state
        if not saved or saved["k"] != self.k or not saved["batches"] or saved["batches"][0]["pos"] != st.data_pos \
                or saved["batches"][0]["step"] != st.step:
            return False
        for b in saved["batches"]:
            fut: Future = Future()
            fut.set_result((b["rollouts"], b["produce_s"], b["probe"]))
            self.inflight.append(Batch(b["version"], b["step"], b["pos"], fut))
        last = self.inflight[-1]
        self.cursor, self.next_step = last.pos + self.ctx.cfg.rl.prompts_per_step, last.step + 1
        self.lags = dict(saved["lags"])
        return True

    def _submit(self) -> None:
        ctx, c = self.ctx, self.ctx.cfg.rl
        st = ctx.state
        pos = self.cursor
        tasks = take(ctx.train_tasks, ctx.cfg.seed + st.stage_idx, pos, c.prompts_per_step)
        seed = ctx.step_seed() + 31 * (self.next_step - st.step)  # step_seed of the batch's step (linear in step)
        # the snapshot travels in a one-item list that _produce empties once it is loaded: the work item would
        # otherwise keep a second copy of the weights alive through the whole batch (and the trainer's update)
        fut = self.pool.submit(self._produce, [self._snapshot(ctx.policy.model)], dist.shard(tasks), seed,
                               self.next_step, st.step)
        self.inflight.append(Batch(st.step, self.next_step, pos, fut))
        self.cursor += len(tasks)
        self.next_step += 1

    def publish(self) -> None:
        """Partial rollouts: offer the trainer's current weights (version = its step) to episodes in progress."""
        self._published = (self.ctx.state.step, self._snapshot(self.ctx.policy.model))

    def _newest(self) -> int:
        """Before a batched decode (producer thread): load the published weights if newer; the acting version."""
        pub = self._published
        if pub is not None and pub[0] > self._acting:
            self._load(pub[1])
            self._acting = pub[0]
        return self._acting

    def _produce(self, held: list, tasks, seed, step, version) -> tuple[Rollouts, float, ProbeBatch | None]:
        """held: [the weights snapshot], emptied here once loaded (nothing keeps the snapshot after that)."""
        t0 = time.perf_counter()
        if self._last_end is not None:  # the queue was full (or the trainer slow to submit): the thread waited
            self._idle += t0 - self._last_end
        self._load(held.pop())
        self._acting = version
        cfg = self.ctx.cfg
        if self.partial and not is_repo_batch(tasks):
            raise CodechatError("rl.partial_rollouts needs repository tasks (multi-turn episodes); data.train has "
                                "single-answer tasks")
        r = collect_rollouts(self.ctx, self.sampler, tasks, cfg.rl.group_size, seed, policy=self.behaviour,
                             before_turn=self._newest if self.partial else lambda: version)  # the producer's copy
        pb = self.probe.sample(self.sampler, step) if self.probe is not None else None
        self._last_end = time.perf_counter()
        return r, self._last_end - t0, pb

    def next_batch(self) -> tuple[Rollouts, dict]:
        """The oldest batch in flight (waiting for it if needed), then the queue refilled to k with the current
        weights. metrics: samples, async/staleness, async/wait_s (trainer idle),
        async/queue_depth (finished batches waiting when the trainer asked, this one included),
        async/producer_idle_s (producer thread idle since the last batch was taken), async/lag_D (share of this
        stage's samples so far trained D versions behind, D = 0..k)."""
        st, c = self.ctx.state, self.ctx.cfg.rl
        t0 = time.perf_counter()
        if self.partial:
            self.publish()
        depth = sum(b.future.done() for b in self.inflight)
        b = self.inflight.popleft()
        r, produce_s, pb = b.future.result()
        version, self.probe_batch = b.version, pb
        wait = time.perf_counter() - t0
        st.data_pos += c.prompts_per_step  # consumed: what a checkpoint resumes from
        while len(self.inflight) < self.k and self.next_step < c.steps:  # batch s + k from the weights of now
            self._submit()
        lag = st.step - version
        self.lags[lag] = self.lags.get(lag, 0) + len(r.verdicts)
        total = sum(self.lags.values())
        idle, self._idle = self._idle, 0.0
        extra = {"samples": len(r.verdicts), "async/staleness": float(lag), "async/wait_s": wait,
                 "async/produce_s": produce_s,
                 "async/queue_depth": float(depth), "async/producer_idle_s": idle,
                 **{f"async/lag_{d}": self.lags.get(d, 0) / total for d in range(self.k + 1)}}
        if r.episodes:
            extra.update(episode_metrics(r))
            turns = [u.version for e in r.episodes for u in e.transcript.turns]
            extra["async/partial_turns_frac"] = sum(v > version for v in turns) / max(len(turns), 1)
        return r, extra

    def close(self) -> None:
        for b in self.inflight:
            b.future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)

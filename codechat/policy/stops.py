"""Stop-string detection during sampling, incremental per sample.

Byte-level BPE tokenizers (GPT-2 style, our presets, Qwen, Llama 3): each token maps to a fixed byte string, so a
sample's text is the concatenation of its tokens' bytes; we keep a byte buffer per sample and search only its
tail (O(1) per token). Other tokenizers (SentencePiece): the sample's ids are decoded whole at every step
(exact, slower; only when stop strings are set). Special tokens contribute no text, as in `decode(...,
skip_special_tokens=True)`.
"""
from __future__ import annotations

import json


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def token_bytes_table(tokenizer) -> list[bytes] | None:
    """Per token id, its bytes in decoded text; None when the tokenizer is not byte-level BPE."""
    try:
        decoder = json.loads(tokenizer.backend_tokenizer.to_str()).get("decoder") or {}
    except AttributeError:
        return None
    if decoder.get("type") != "ByteLevel":
        return None
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    table = []
    for piece in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))):
        try:
            table.append(bytes(byte_of[c] for c in piece or ""))
        except KeyError:  # an added token stored as plain text
            table.append((piece or "").encode())
    for i, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if i < len(table):
            table[i] = b"" if added.special else added.content.encode()
    return table


class StopChecker:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._table: list[bytes] | None | bool = False  # False = not built yet

    @property
    def table(self):
        if self._table is False:
            self._table = token_bytes_table(self.tokenizer)
        return self._table

    def start(self, n: int, stops: list[str]):
        """State for n samples, or None when there is nothing to check."""
        stops = [s for s in stops if s]
        if not stops:
            return None
        if self.table is not None:
            return {"stops": [s.encode() for s in stops], "bufs": [bytearray() for _ in range(n)]}
        return {"stops": stops, "ids": [[] for _ in range(n)]}

    def update(self, state, rows: list[int], toks: list[int]) -> list[bool]:
        """Append toks[b] to sample rows[b] (rows >= n are ignored); True where a stop string now occurs."""
        out = []
        if "bufs" in state:
            bufs, table = state["bufs"], self.table
            for r, t in zip(rows, toks):
                if r >= len(bufs):
                    out.append(False)
                    continue
                buf, piece = bufs[r], table[t] if t < len(table) else b""
                buf += piece
                out.append(any(buf.find(s, max(0, len(buf) - len(piece) - len(s) + 1)) >= 0
                               for s in state["stops"]))
            return out
        ids = state["ids"]
        for r, t in zip(rows, toks):
            if r >= len(ids):
                out.append(False)
                continue
            ids[r].append(t)
            text = self.tokenizer.decode(ids[r], skip_special_tokens=True)
            out.append(any(s in text for s in state["stops"]))
        return out

"""Framing between sandbox processes: a 4-byte big-endian length, then the payload; `recv` refuses payloads
over a size cap. What the payloads hold is in wire.py (values) and grammar.py (the messages a program may send).
"""
from __future__ import annotations

import os
import struct


class WireError(Exception):
    """A message could not be read, was too large, or was not valid plain data."""


def send(fd: int, payload: bytes) -> None:
    data = struct.pack(">I", len(payload)) + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int, max_bytes: int = 1 << 26) -> bytes:
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    if n > max_bytes:
        raise WireError(f"message of {n} bytes exceeds the {max_bytes}-byte cap")
    return _read_exact(fd, n)


class Reader:
    """Framed messages from a stream fd, read in as few syscalls as possible (usually one per message).
    Bytes past the current frame stay buffered for the next `recv`: the stream's meaning is unchanged."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = b""

    def ready(self) -> bool:
        """Whether a whole frame is buffered already (a recv would not read the fd)."""
        return len(self.buf) >= 4 and len(self.buf) >= 4 + _HEAD.unpack_from(self.buf)[0]

    def recv(self, max_bytes: int = 1 << 26) -> bytes:
        buf = self.buf
        while len(buf) < 4:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise WireError("channel closed")
            buf += chunk
        (n,) = _HEAD.unpack_from(buf)
        if n > max_bytes:
            raise WireError(f"message of {n} bytes exceeds the {max_bytes}-byte cap")
        end = 4 + n
        if len(buf) < end:
            chunks, have = [buf], len(buf)
            while have < end:
                chunk = os.read(self.fd, min(end - have, 1 << 20) if end - have > 1 << 16 else 1 << 16)
                if not chunk:
                    raise WireError("channel closed")
                chunks.append(chunk)
                have += len(chunk)
            buf = b"".join(chunks)
        self.buf = buf[end:]
        return buf[4:end]


_HEAD = struct.Struct(">I")

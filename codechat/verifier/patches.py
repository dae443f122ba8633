"""Unified diffs -> file changes, strictly: parse `git diff` / `diff -u` text and apply it to a tree's files.

Grammar (what `parse_diff` accepts): optional `diff --git a/P b/P` and extended header lines (`index`, `new file
mode`, `deleted file mode`, `similarity`...), then `--- a/P` or `--- /dev/null`, `+++ b/P` or `+++ /dev/null`,
then hunks `@@ -S[,L] +S[,L] @@` whose lines start with ' ', '-', '+' or '\\' (no newline at end of file).
Anything else between files is ignored (commit messages); anything malformed inside a hunk, a hunk whose counts
do not add up, or a path that could leave the tree raises PatchError with the line number. Hunks apply where
they say, or at the nearest offset where their context matches exactly (no fuzz).
Binary patches, renames and mode-only changes are refused (the judge deals in text files).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Callable

from codechat import CodechatError
from codechat.sandbox.workspace import WorkspaceError, safe_path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
MAX_PATCH_CHARS = 8 << 20


class PatchError(CodechatError):
    """A diff that cannot be parsed or applied; the message says where."""


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[str] = field(default_factory=list)
    """Body lines with their ' ', '-', '+' prefix (newline-free); '\\' markers folded into `no_eol_*`."""
    no_eol_old: bool = False
    no_eol_new: bool = False


@dataclass
class FilePatch:
    path: str
    """Workspace-relative path (the new path; the old one for a deletion)."""
    is_new: bool = False
    is_delete: bool = False
    hunks: list[Hunk] = field(default_factory=list)


def _path(raw: str, lineno: int) -> str | None:
    raw = raw.split("\t", 1)[0].strip()
    if raw == "/dev/null":
        return None
    if raw.startswith(("a/", "b/")):
        raw = raw[2:]
    try:
        return safe_path(raw)
    except WorkspaceError as e:
        raise PatchError(f"line {lineno}: {e}") from None


_GIT_HEADER = re.compile(r"diff --git a/(\S+) b/(\S+)")


def _empty_file(lines: list[str], i: int) -> FilePatch | None:
    """The empty file a `diff --git` header at line i creates or deletes with no `---`/`+++` lines and no hunks
    (git's form for an empty file), or None."""
    m = _GIT_HEADER.fullmatch(lines[i])
    if not m or m[1] != m[2]:
        return None
    j, mode = i + 1, None
    while j < len(lines) and not lines[j].startswith(("diff --git ", "--- ", "@@")):
        if lines[j].startswith(("new file mode ", "deleted file mode ")):
            mode = lines[j].split()[0]
        j += 1
    if mode is None or (j < len(lines) and not lines[j].startswith("diff --git ")):
        return None
    return FilePatch(_path(m[2], i + 1), is_new=mode == "new", is_delete=mode == "deleted")


def parse_diff(text: str) -> list[FilePatch]:
    if len(text) > MAX_PATCH_CHARS:
        raise PatchError(f"patch larger than {MAX_PATCH_CHARS} characters")
    lines = text.splitlines()
    out: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError(f"line {i + 1}: binary patches are not supported")
        if line.startswith(("rename from", "rename to", "copy from", "copy to")):
            raise PatchError(f"line {i + 1}: renames and copies are not supported (delete + add instead)")
        empty = _empty_file(lines, i)
        if empty is not None:  # git writes an empty file's creation or deletion as a header alone
            out.append(empty)
            i += 1
            continue
        if not (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old, new = _path(line[4:], i + 1), _path(lines[i + 1][4:], i + 2)
        if old is None and new is None:
            raise PatchError(f"line {i + 1}: both sides are /dev/null")
        fp = FilePatch(new or old, is_new=old is None, is_delete=new is None)
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header {lines[i][:60]!r}")
            h = Hunk(int(m[1]), int(m[2]) if m[2] is not None else 1, int(m[3]), int(m[4]) if m[4] is not None else 1)
            i += 1
            n_old = n_new = 0
            while i < len(lines) and (n_old < h.old_len or n_new < h.new_len or
                                      (i < len(lines) and lines[i].startswith("\\"))):
                body = lines[i]
                tag = body[:1] if body else " "  # some tools drop the space of an empty context line
                if tag == "\\":
                    if h.lines and h.lines[-1][0] in " -":
                        h.no_eol_old = True
                    if h.lines and h.lines[-1][0] in " +":
                        h.no_eol_new = True
                elif tag in " -+":
                    h.lines.append(tag + body[1:])
                    n_old += tag != "+"
                    n_new += tag != "-"
                else:
                    raise PatchError(f"line {i + 1}: hunk line must start with ' ', '-', '+' or '\\'")
                i += 1
            if n_old != h.old_len or n_new != h.new_len:
                raise PatchError(f"line {i}: hunk counts do not match its header (-{h.old_len} +{h.new_len})")
            fp.hunks.append(h)
        if not fp.hunks and not (fp.is_delete or fp.is_new):  # an empty file is created/deleted without hunks
            raise PatchError(f"line {i}: no hunks for {fp.path}")
        out.append(fp)
    if not out:
        raise PatchError("no file changes found (expected a unified diff)")
    return out


def _apply_file(fp: FilePatch, old_text: str | None) -> str:
    if fp.is_new and old_text is not None:
        raise PatchError(f"{fp.path}: patch creates the file but it already exists")
    if not fp.is_new and old_text is None:
        raise PatchError(f"{fp.path}: no such file to patch")
    src = [] if not old_text else old_text.split("\n")
    had_eol = not old_text or old_text.endswith("\n")
    if src and src[-1] == "" and had_eol:
        src.pop()
    out, pos, eol = [], 0, had_eol
    for h in fp.hunks:
        want = [l[1:] for l in h.lines if l[0] in " -"]
        start = max(0, h.old_start - 1 if h.old_len else h.old_start)
        at = next((s for d in range(len(src) + 1) for s in (start - d, start + d)
                   if pos <= s <= len(src) - len(want) and src[s:s + len(want)] == want), None)
        if at is None:
            raise PatchError(f"{fp.path}: hunk @@ -{h.old_start},{h.old_len} @@ does not match the file")
        out += src[pos:at] + [l[1:] for l in h.lines if l[0] in " +"]
        pos = at + len(want)
        if pos == len(src) and (h.no_eol_new or h.no_eol_old):
            eol = not h.no_eol_new
    out += src[pos:]
    if not out:
        return ""
    return "\n".join(out) + ("\n" if eol else "")


def apply_diff(text: str, read: Callable[[str], str | None]) -> dict[str, str | None]:
    """The changes a diff makes: {path: new text, or None for a deletion}; `read(path)` gives the current text."""
    changes: dict[str, str | None] = {}
    for fp in parse_diff(text):
        current = changes[fp.path] if fp.path in changes else read(fp.path)
        changes[fp.path] = None if fp.is_delete else _apply_file(fp, current)
    return changes


def make_diff(before: Callable[[str], str | None], changes: dict[str, str | None]) -> str:
    """A unified diff of `changes` against `before` (for transcripts and `codechat verify` inputs)."""
    parts = []
    for path in sorted(changes):
        a, b = before(path), changes[path]
        al = [] if a is None else a.splitlines(keepends=True)
        bl = [] if b is None else b.splitlines(keepends=True)
        for seq in (al, bl):
            if seq and not seq[-1].endswith("\n"):
                seq[-1] += "\n\\ No newline at end of file\n"
        diff = difflib.unified_diff(al, bl, "/dev/null" if a is None else f"a/{path}",
                                    "/dev/null" if b is None else f"b/{path}")
        text = "".join(diff)
        if not text and a != b:  # an empty file created or deleted: headers only
            text = f"--- {'/dev/null' if a is None else 'a/' + path}\n+++ {'/dev/null' if b is None else 'b/' + path}\n"
        parts.append(text)
    return "".join(parts)

"""Extract the program to run from a completion: `extract_code` (fenced blocks, unfenced code after prose, a
HumanEval-style continuation of the prompt) and `task_prelude` (the task-authored code the judge runs before the
tests). Plain text functions: linear scans on hostile text, no sandbox.

    from codechat.verifier.extract import extract_code
    code = extract_code(completion, task)   # None when the completion holds no code
"""
from __future__ import annotations

import ast
import re

from codechat.tasks import Task

# A fence opens at the start of a line and closes at the start of a line (or the text's end), as in Markdown:
# a ``` inside a string of the code does not cut the block, and the scan stays linear in the text's length.
# An opening fence may follow text on its line ("Here:```python"); a closing one starts or ends a line, so a
# "```" inside a string literal does not cut the block. Scanned with str.find: linear on hostile text.
_INFO = re.compile(r"[ \t]*([\w+#.-]*)")
_CLOSE = re.compile(r"^[ \t]*```|```[ \t]*$", re.M)
_PY_LANGS = {"", "python", "py", "python3", "py3"}
_CODE_START = re.compile(r"^(def |class |import |from |@|async def )")
_LOOKS_LIKE_CODE = re.compile(r"^(\s|#|def |class |import |from |@|async |if |for |while |return |print\(|"
                              r"[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*(=|\(|\[))")


def _defines(code: str, name: str | None) -> bool:
    return bool(name) and re.search(rf"^[ \t]*(async[ \t]+)?(def|class)\s+{re.escape(name)}\b", code, re.M) is not None


_TOP_DEF = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)|^([A-Za-z_]\w*)[ \t]*=", re.M)
_WORD = re.compile(r"[A-Za-z_]\w*")


def _with_helpers(code: str, blocks: list[str]) -> str:
    """`code` preceded by the earlier blocks that define a top-level name it uses and does not define itself
    (a helper in its own fence before the solution), in their order."""
    used = set(_WORD.findall(code)) - {a or b for a, b in _TOP_DEF.findall(code)}
    before = blocks[:next(i for i in range(len(blocks) - 1, -1, -1) if blocks[i] is code)]
    helpers = [b for b in before if used & {a or b2 for a, b2 in _TOP_DEF.findall(b)}]
    return "\n".join([*helpers, code]) if helpers else code


def _is_code(prompt: str) -> bool:
    """A prompt that is itself code to continue (HumanEval, a `class Solution:` header ending mid-body), not
    prose that shows a starter in a fence."""
    if "```" in prompt:
        return False
    last = next((ln for ln in reversed(prompt.splitlines()) if ln.strip()), "")
    indent = last[:len(last) - len(last.lstrip())] + ("    " if last.rstrip().endswith(":") else "")
    for src in (prompt, prompt.rstrip() + "\n" + indent + "pass\n"):  # a header with no body yet
        try:
            ast.parse(src)
            return True
        except (SyntaxError, ValueError):
            continue
    return False


def _head(entry_point: str | None) -> str | None:
    """The name an entry point starts with: `f` for `f`, `Solution` for `Solution().maxProfit`."""
    m = re.match(r"[A-Za-z_]\w*", entry_point or "")
    return m.group(0) if m else None


def task_prelude(task: Task) -> str:
    """The task-authored code the judge runs before the tests: a loader's harness prelude (`metadata["prelude"]`:
    LeetCodeDataset's imports and ListNode/TreeNode helpers) and, for a HumanEval-style prompt, everything before
    the entry point's definition (imports, helpers such as `poly` / `encode_cyclic`, classes). The judge runs it
    itself, so the tests get the task's helpers, not the program's versions of them. The program gets the same
    code before its own (`extract_code`), so its annotations and calls see those names too."""
    harness = task.metadata.get("prelude") or ""
    return harness + _prompt_prelude(task) if harness else _prompt_prelude(task)


def _prompt_prelude(task: Task) -> str:
    head = _head(task.entry_point)
    if not head or not _defines(task.prompt, head) or not _is_code(task.prompt):  # prose shows no prelude
        return ""
    m = re.search(rf"^(async\s+)?(def|class)\s+{re.escape(head)}\b", task.prompt, re.M)
    return task.prompt[:m.start()] if m else ""


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block; an unclosed last block runs to the end."""
    blocks, i = [], 0
    while (j := text.find("```", i)) >= 0:
        nl = text.find("\n", j + 3)
        if nl < 0:
            break
        lang = _INFO.match(text, j + 3, nl).group(1).lower()
        close = _CLOSE.search(text, nl + 1)
        blocks.append((lang, text[nl + 1:close.start() if close else len(text)]))
        if close is None:
            break
        i = close.end()
    return blocks


def extract_code(completion: str, task: Task) -> str | None:
    """The program to run, or None when the completion holds no code.

    Fenced blocks (```python or bare ```): the last one that defines the entry point, else the last
    ```python block (a bare fence after it holds sample input or a shell command), else the last bare one.
    Unfenced text is taken as code, minus leading prose lines. HumanEval-style continuation: when the prompt
    itself defines the entry point, the completion continues the prompt (prompt + completion); if the
    completion redefines the function, the prompt still comes first so its imports apply.
    """
    if not completion or not completion.strip():
        return None
    blocks = _fenced_blocks(completion)
    if blocks:
        py = [b for lang, b in blocks if lang in _PY_LANGS] or [b for _, b in blocks]
        tagged = [b for lang, b in blocks if lang in _PY_LANGS and lang]  # (a bare fence after the ```python one
        defining = [b for b in py if _defines(b, _head(task.entry_point))]  # is sample input or a command)
        code = _with_helpers((defining or tagged or py)[-1], py)
    else:
        code = completion
        lines = code.splitlines(keepends=True)
        first = next((i for i, ln in enumerate(lines) if ln.strip()), 0)
        mid_line = task.prompt.endswith((" ", "\t")) and _defines(task.prompt, _head(task.entry_point))
        if not mid_line and not _LOOKS_LIKE_CODE.match(lines[first]):  # leading prose ("Here is the solution:")
            start = next((i for i in range(first, len(lines)) if _CODE_START.match(lines[i])), None)
            if start is None:
                return None  # prose only
            code = "".join(lines[start:])
    if not code.strip():
        return None
    if task.entry_point and _defines(task.prompt, _head(task.entry_point)) and _is_code(task.prompt):
        # HumanEval-style: the prompt is code ending in the signature + docstring; the completion continues it.
        # A completion that redefines the function comes after the prompt's prelude (its imports and helpers),
        # not after the unfinished signature (a `class Solution:` prompt ends mid-body).
        code = _prompt_prelude(task) + "\n" + code if _defines(code, _head(task.entry_point)) else task.prompt + code
    if task.metadata.get("prelude"):  # the harness imports of call-based competitive tasks (stdio_loaders.py)
        code = task.metadata["prelude"] + code
    return code

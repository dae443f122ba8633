"""codechat: post-train code language models with reinforcement learning from executable rewards."""

import warnings as _warnings

__version__ = "0.1.0"


class CodechatError(Exception):
    """An error a user caused (bad file, bad config value, missing path). The CLI prints it as one line."""


# Model-written code parsed or compiled from a string (ast.parse's "<unknown>", "<candidate>", ...) raises
# SyntaxWarnings (and on Python < 3.12 DeprecationWarnings for invalid escapes like '\d') that say nothing
# about codechat: silence those; warnings about real files still show.
for _category in (SyntaxWarning, DeprecationWarning):
    _warnings.filterwarnings("ignore", category=_category, module=r"<.*>\Z")

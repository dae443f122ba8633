"""codechat: post-train code language models with reinforcement learning from executable rewards."""

__version__ = "0.1.0"


class CodechatError(Exception):
    """An error a user caused (bad file, bad config value, missing path). The CLI prints it as one line."""

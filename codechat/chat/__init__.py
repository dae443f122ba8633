"""The interactive chat: the session (`session`) and its sandboxed `/run` and `/test` (`run`)."""

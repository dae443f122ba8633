"""The CPU demos: `codechat demo` (demo.py: SFT on buggy code, then RFT + GRPO from the verifier) and
`codechat demo --agent` (agent.py: the same for repository agents)."""

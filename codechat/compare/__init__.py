"""`codechat compare` behind the CLI: what runs (plan.py), running and resuming one (method, seed) curve
(runs.py), and the report from the results alone (report.py). The command is codechat/commands/compare.py."""

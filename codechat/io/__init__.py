"""Run directories and their files: the layout (rundir), the run log (runlog), JSONL reading and writing
(jsonl), curves (plotting)."""

"""Evaluation: unbiased pass@k, sampled evaluation of a policy, reports (`evaluate`)."""

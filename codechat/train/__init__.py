"""Training: the stages (train/stages.py registry: sft, rft, grpo, rloo, dpo), the run loop with checkpoints and
resume (runner.py), and what the stages share (common.py, dist.py, checkpoint.py, metrics.py).

    from codechat.train import train
    train(load_config("configs/grpo.yaml", ["rl.lr=3e-5"]))      # = codechat train --config ... rl.lr=3e-5
    train(resume="runs/x")                                        # = codechat train --resume runs/x
"""
from codechat.train.runner import train

__all__ = ["train"]

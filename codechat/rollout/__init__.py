"""Tasks -> rollouts: sampling and verifying a batch (`collect`), composable rewards (`rewards`), and the reward-hack
audit of what was sampled (`audit`). Multi-turn episodes (a sequence of model turns and tool results) belong here too.
"""

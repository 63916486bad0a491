"""Rollout functions that wrap another and add to its episodes after it returns: judged reward
parts (``JudgedRollout``), each prompt's greedy baseline
(``GreedyBaseline``)."""

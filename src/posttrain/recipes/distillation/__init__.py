"""Distillation stages: offline KD and on-policy distillation, their teachers."""

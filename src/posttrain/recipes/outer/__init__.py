"""Outer loops around a trained model: tau-bench evaluation (pass^k), harness search."""

"""Layer 6: one file per stage wiring rollout and training (``sft``, ``dpo``, ``reward_model``,
``distillation``, ``rl``), ``build`` (config -> engine, tasks, reward, judges, teachers) and
``stages`` (the run a config describes)."""

from posttrain.recipes.report import Reporter, plot_curves
from posttrain.recipes.rl import run_async_rl, run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.recipes.sft import run_sft

__all__ = ["RLRun", "Reporter", "plot_curves", "run_async_rl", "run_rl", "run_sft"]

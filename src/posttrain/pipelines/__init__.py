"""Layer 6: the loops (SFT, synchronous and asynchronous RL, evaluation) and their settings."""

from posttrain.pipelines.async_rl import run_async_rl
from posttrain.pipelines.evaluation import evaluate
from posttrain.pipelines.plots import plot_curves
from posttrain.pipelines.report import Reporter
from posttrain.pipelines.rl import MismatchError, run_rl
from posttrain.pipelines.rl_run import RLRun
from posttrain.pipelines.rollout import rollout
from posttrain.pipelines.settings import (
    AlgoConfig,
    DynamicSamplingConfig,
    EvalConfig,
    RLConfig,
    SFTConfig,
)
from posttrain.pipelines.sft import run_sft
from posttrain.pipelines.sft_data import ChatData, generate_arithmetic_sft, load_chat_jsonl

__all__ = [
    "AlgoConfig",
    "DynamicSamplingConfig",
    "ChatData",
    "EvalConfig",
    "MismatchError",
    "RLConfig",
    "RLRun",
    "Reporter",
    "SFTConfig",
    "evaluate",
    "generate_arithmetic_sft",
    "load_chat_jsonl",
    "plot_curves",
    "rollout",
    "run_async_rl",
    "run_rl",
    "run_sft",
]

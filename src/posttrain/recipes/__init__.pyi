# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .launch import train
from .rl import run_async_rl, run_rl
from .sampling_loop import RLRun
from .sft import run_sft

__all__ = ["RLRun", "run_async_rl", "run_rl", "run_sft", "train"]

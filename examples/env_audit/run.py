"""Find the holes planted in a code environment, block them with the guard the audit proposes,
and audit again (docs/env_audit.md).

    python examples/env_audit/run.py [--tasks 5]

The environment (planted.py) leaves its hidden cases in the workspace and trusts a module that
prints PASS. The first audit finds both holes; the second, with the proposed agent.guard
settings, finds none. Prints both tables and the guard settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from posttrain.config.task_config import GuardConfig
from rich.console import Console
from rich.markdown import Markdown

from posttrain.audit import audit
from posttrain.audit.report import attack_sampling
from posttrain.config import LoopLimits, load_config
from posttrain.models.tiny import build_tokenizer
from posttrain.recipes.judges import build_guard
from posttrain.rollout import AgentRollout

sys.path.insert(0, str(Path(__file__).parent))
from planted import PlantedCodeTasks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5)
    args = parser.parse_args()
    tasks, tokenizer = PlantedCodeTasks(seed=0, n_problems=100), build_tokenizer()
    reward = load_config("configs/code.yaml").reward.function()
    sampling = attack_sampling(8192, tokenizer.eos_token_id)

    def audited(guard=None):
        rollout = AgentRollout(tasks.tools, LoopLimits(max_turns=6, max_tokens=200_000),
                               env_factory=tasks.make_env, guard=guard)
        return audit("planted code", tasks.tools.schemas(), tasks.eval_set(args.tasks),
                     lambda engine, ts: rollout(engine, tokenizer, ts, reward, sampling, 1),
                     "correct", tokenizer)

    console = Console()
    first = audited()
    console.print(Markdown(first.markdown()))
    fix = first.guard_fix()
    console.print(f"holes: {', '.join(f.exploit for f in first.holes())}; the guard to add:")
    console.print(yaml.safe_dump({"agent": {"guard": fix}}, sort_keys=False))
    second = audited(build_guard(GuardConfig(**fix), "fp32", 0))
    console.print(Markdown(second.markdown()))
    console.print(f"holes with the guard: {len(second.holes())}")


if __name__ == "__main__":
    main()

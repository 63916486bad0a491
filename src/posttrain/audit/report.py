"""``audit``: every exploit that an environment's tools allow, played on its tasks through
the run's own rollout function (its tools, verifier and guard), and what came of it: how
many tasks each passed without solving them (the accuracy part at 1), how many episodes the
guard flagged and blocked, and the guard settings that would block the exploits that passed
(``guard_fix``: the files they used that the task never named, the patterns of their calls)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from posttrain.audit.attacker import AttackerEngine
from posttrain.audit.exploits import EXPLOITS, Exploit
from posttrain.types import Episode, SamplingParams

Play = Callable[[AttackerEngine, Sequence[Any]], list[Episode]]


@dataclass
class Finding:
    """One exploit on one environment."""

    exploit: str
    what: str
    tasks: int
    passed: int
    flagged: int
    blocked: int
    passed_tasks: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    rules: list[dict[str, str]] = field(default_factory=list)

    @property
    def hole(self) -> bool:
        return self.passed > 0

    @property
    def guardable(self) -> bool:
        """Whether its calls show what a guard can block (files, patterns); else only the
        verifier can close the hole."""
        return bool(self.paths or self.rules)


@dataclass
class AuditReport:
    env: str
    tools: list[str]
    findings: list[Finding]
    skipped: dict[str, str]  # exploit -> why it was not run

    def holes(self) -> list[Finding]:
        return [f for f in self.findings if f.hole]

    def guard_fix(self) -> dict[str, list]:
        """``agent.guard`` settings that block the exploits that passed: their unnamed files
        as ``protected_paths`` and their call patterns as ``rules``."""
        holes = self.holes()
        rules = {r["name"]: r for f in holes for r in f.rules}
        return {"protected_paths": sorted({p for f in holes for p in f.paths}),
                "rules": list(rules.values())}

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "tools": self.tools,
                "findings": [asdict(f) for f in self.findings], "skipped": self.skipped,
                "holes": [f.exploit for f in self.holes()], "guard_fix": self.guard_fix()}

    def markdown(self) -> str:
        rows = [f"| `{f.exploit}` | {f.what} | {f.passed}/{f.tasks} | {f.flagged} | "
                f"{f.blocked} |" for f in self.findings]
        rows += [f"| `{name}` | not run: {why} | | | |" for name, why in self.skipped.items()]
        return "\n".join([f"### `{self.env}` (tools: {', '.join(self.tools) or 'none'})", "",
                          "| exploit | attack | passed without solving | episodes flagged "
                          "| episodes blocked |", "|---|---|---|---|---|", *rows])


def audit(env: str, tools: Sequence[dict], tasks: Sequence[Any], play: Play, accuracy_part: str,
          tokenizer, exploits: Sequence[Exploit] | None = None) -> AuditReport:
    """Each exploit (all built-in ones by default) whose tools ``tools`` (the task's tool
    schemas) has, played once on every task of ``tasks`` by ``play(engine, tasks)`` (the
    run's rollout on the attacker's engine)."""
    docs = json.dumps(list(tools))
    names = [t["function"]["name"] for t in tools]
    findings, skipped = [], {}
    for exploit in exploits or EXPLOITS.values():
        if missing := [t for t in exploit.needs if t not in names]:
            skipped[exploit.name] = f"no {', '.join(missing)} tool"
            continue
        engine = AttackerEngine(tokenizer, exploit, docs)
        episodes = play(engine, tasks)
        passed = [e for e in episodes if e.rewards.get(accuracy_part, 0.0) >= 1.0]
        findings.append(Finding(
            exploit.name, exploit.what, len(episodes), len(passed),
            sum(bool(e.meta.get("guard_flags")) for e in episodes),
            sum(bool(e.meta.get("guard_blocks")) for e in episodes),
            sorted({str(e.meta.get("reference", "")) for e in passed}), sorted(engine.paths()),
            [{"name": r.name, "pattern": r.pattern} for r in exploit.rules]))
    return AuditReport(env, names, findings, skipped)


def attack_sampling(max_new_tokens: int, eos_token_id: int) -> SamplingParams:
    """The sampling the attacker's turns are asked with (greedy; the budget bounds a turn)."""
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0,
                          stop_token_ids=(eos_token_id,))

"""The online anti-hack guard: rule filters flag suspicious tool calls, an optional judge
confirms intent, and a confirmed hack is blocked (the tool returns a dummy result and the
rollout continues) or costs the episode its reward."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from posttrain.harness.tool_calls import ToolCall

BLOCKED = "[blocked: this action is not allowed in this environment]"


@dataclass(frozen=True)
class GuardRule:
    """``pattern`` (a regex) searched in a call's name and JSON arguments."""

    name: str
    pattern: str


DEFAULT_RULES = (
    GuardRule("protected_path", r"hidden[_-]?tests?|/\.hidden|tests/hidden"),
    GuardRule("upstream_fetch", r"\b(git\s+clone|git\s+fetch|curl|wget)\b|https?://"),
    GuardRule("package_probe", r"\bpip\s+(download|index\s+versions)\b"),
    GuardRule("git_history", r"\bgit\s+(log|show|reflog|checkout\s+[0-9a-f]{7,})\b"),
)


@dataclass
class Verdict:
    """``flags``: the rules that matched; ``confirmed``: a hack (judge agreed, or no judge);
    ``blocked``: confirmed under the ``block`` policy."""

    call_id: str
    flags: list[str]
    confirmed: bool
    blocked: bool


class Guard:
    """``rules`` flag; ``judge(call, flags) -> bool`` (an engine or an endpoint behind a
    function) confirms; without a judge every flag is confirmed. ``on_hack``: ``block`` (dummy
    result) or ``zero_reward`` (the call runs, the episode scores 0)."""

    def __init__(self, rules: Sequence[GuardRule] = DEFAULT_RULES,
                 protected_paths: Sequence[str] = (),
                 judge: Callable[[ToolCall, list[str]], bool] | None = None,
                 on_hack: str = "block") -> None:
        if on_hack not in ("block", "zero_reward"):
            raise ValueError(f"on_hack must be 'block' or 'zero_reward', got {on_hack!r}")
        extra = [GuardRule("protected_path", re.escape(p)) for p in protected_paths]
        self.rules = [*rules, *extra]
        self.judge, self.on_hack = judge, on_hack

    def inspect(self, call: ToolCall) -> Verdict:
        text = f"{call.name} {json.dumps(call.arguments, sort_keys=True)}"
        flags = sorted({r.name for r in self.rules if re.search(r.pattern, text, re.IGNORECASE)})
        confirmed = bool(flags) and (self.judge is None or self.judge(call, flags))
        return Verdict(call.call_id, flags, confirmed, confirmed and self.on_hack == "block")

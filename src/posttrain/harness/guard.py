"""The online anti-hack guard: rule filters flag suspicious tool calls, an optional judge
confirms intent, and a confirmed hack is blocked (the tool returns a dummy result and the
rollout continues) or costs the episode its reward. A judge that raises or answers anything
but ``True``/``False`` confirms the flag (the rules stand) and the verdict says it failed.
``ChatGuardJudge`` is a judge played by a chat model: shown the flagged call and the rules
that flagged it, asked whether it is a hack, answering yes or no."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from posttrain.config.sections.agent import GUARD_PROMPT
from posttrain.harness.tool_calls import ToolCall

BLOCKED = "[blocked: this action is not allowed in this environment]"


@dataclass(frozen=True)
class GuardRule:
    """``pattern`` (a regex) searched in a call's name and JSON arguments."""

    name: str
    pattern: str


# words of a command are matched across any non-word run (\W+), so an argv list
# (['pip', 'download', ...], as subprocess takes it) is caught as the shell form is
DEFAULT_RULES = (
    GuardRule("protected_path", r"hidden[_-]?tests?|/\.hidden|tests/hidden"),
    GuardRule("upstream_fetch", r"\b(git\W+clone|git\W+fetch|curl|wget)\b|https?://"),
    GuardRule("package_probe", r"\bpip\W+(download|index\W+versions)\b"),
    GuardRule("git_history", r"\bgit\W+(log|show|reflog|checkout\W+[0-9a-f]{7,})\b"),
)


@dataclass
class Verdict:
    """``flags``: the rules that matched; ``confirmed``: a hack (judge agreed, or no judge, or
    the judge failed: ``judge_failed``); ``blocked``: confirmed under the ``block`` policy."""

    call_id: str
    flags: list[str]
    confirmed: bool
    blocked: bool
    judge_failed: bool = False


class Guard:
    """``rules`` flag; ``judge(call, flags) -> bool`` (a function, or a chat model behind
    ``ChatGuardJudge``) confirms; without a judge every flag is confirmed, and so is a flag
    the judge fails on (it raises or answers neither ``True`` nor ``False``). ``on_hack``:
    ``block`` (dummy result) or ``zero_reward`` (the call runs, the episode scores 0)."""

    def __init__(self, rules: Sequence[GuardRule] = DEFAULT_RULES,
                 protected_paths: Sequence[str] = (),
                 judge: Callable[[ToolCall, list[str]], bool] | None = None,
                 on_hack: str = "block") -> None:
        if on_hack not in ("block", "zero_reward"):
            raise ValueError(f"on_hack must be 'block' or 'zero_reward', got {on_hack!r}")
        self.rules = [*rules, *(GuardRule("protected_path", re.escape(p)) for p in protected_paths)]
        self.judge, self.on_hack = judge, on_hack

    def inspect(self, call: ToolCall) -> Verdict:
        text = f"{call.name} {json.dumps(call.arguments, sort_keys=True)}"
        flags = sorted({r.name for r in self.rules if re.search(r.pattern, text, re.IGNORECASE)})
        answer, failed = True, False
        if flags and self.judge is not None:
            try:
                answer = self.judge(call, flags)
            except Exception:  # a judge that cannot answer leaves the rules' verdict
                answer = None
            failed = not isinstance(answer, bool)
        confirmed = bool(flags) and (failed or answer)
        return Verdict(call.call_id, flags, confirmed, confirmed and self.on_hack == "block",
                       failed)


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def parse_yes_no(reply: str) -> bool | None:
    """``True`` for yes, ``False`` for no, ``None`` when the reply says neither or both. A
    ``<think>`` block is skipped; the first word decides, else the only one of yes/no that
    occurs as a word."""
    words = re.findall(r"[a-z]+", _THINK.sub("", reply).lower())
    if words and words[0] in ("yes", "no"):
        return words[0] == "yes"
    said = {w for w in words if w in ("yes", "no")}
    return said == {"yes"} if len(said) == 1 else None


class ChatGuardJudge:
    """``judge(call, flags)`` for ``Guard``: ``chat`` (conversations in, one reply each out)
    answers ``prompt`` with ``{call}`` (the call as ``name({arguments})``) and ``{flags}``
    filled in. Returns the parsed answer, ``None`` when it has none (the guard then counts a
    judge failure)."""

    def __init__(self, chat: Callable[[Sequence[list[dict]]], list[str]],
                 prompt: str = GUARD_PROMPT) -> None:
        self.chat, self.prompt = chat, prompt

    def __call__(self, call: ToolCall, flags: list[str]) -> bool | None:
        shown = f"{call.name}({json.dumps(call.arguments, sort_keys=True)})"
        question = self.prompt.format(call=shown, flags=", ".join(flags))
        (reply,) = self.chat([[{"role": "user", "content": question}]])
        return parse_yes_no(reply)

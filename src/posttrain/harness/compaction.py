"""Context compaction inside the agent loop (docs/agents.md): the policy, the summary
requests, and the rebuilt context each strategy restarts from.

The loop checks the trigger before every turn (``used > ratio * window``, the window being
``LoopLimits.max_tokens``). Deterministic strategies edit the message list; summarising ones
first ask the policy for a summary (a trainable turn of its own when ``train_summary``). Either
way the loop closes the current ``Segment`` and renders the rebuilt context as the next one.
Messages the harness injects carry ``"injected": True`` (chat templates ignore the key), so the
real user messages stay known.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from posttrain.config.sections.agent import Compaction
from posttrain.harness.context import discard_tool_turns, microcompact, select_recent_user_messages
from posttrain.harness.trace import Trace

SUMMARY_PROMPT = ("Context is nearly full. Summarise the work so far: the task, what you tried, "
                  "the results you got and what remains to do.")
CODEX_PROMPT = ("Write a hand-off summary for the model that will continue this task: the "
                "progress made, key results, decisions, and the next steps.")
CODEX_PREFIX = "A previous model worked on this task and left this summary of its progress:"
CLAUDE_CODE_PROMPT = ("Summarise this conversation. First think in <analysis>...</analysis>, "
                      "then write <summary>...</summary> with sections: request, key concepts, "
                      "files and code, errors and fixes, problem solving, user messages, "
                      "pending tasks, current work, next step.")
CLAUDE_CODE_CONTINUED = ("This session continues an earlier conversation that ran out of "
                         "context. Its summary:")
_PROMPTS = {"summary": SUMMARY_PROMPT, "codex_compact": CODEX_PROMPT,
            "claude_code_compact": CLAUDE_CODE_PROMPT}


def summary_request(c: Compaction, messages: Sequence[dict]) -> list[dict]:
    """The history with the strategy's summary prompt appended as a user turn."""
    return [*messages, {"role": "user", "content": _PROMPTS[c.strategy], "injected": True}]


def rebuild(c: Compaction, task: Sequence[dict], messages: Sequence[dict], summary: str,
            count_tokens: Callable[[str], int]) -> list[dict]:
    """The context the episode continues from. ``task``: the opening messages."""
    s = c.strategy
    if s == "microcompact":
        return microcompact(messages, c.keep_last)
    if s in ("discard_75", "discard_all"):
        return discard_tool_turns(messages, 0.75 if s == "discard_75" else 1.0)
    system = [dict(m) for m in task if m["role"] == "system"]
    if s == "summary":  # V3.2: system + task + summary
        return [*map(dict, task), _injected(f"Summary of the work so far:\n{summary}")]
    if s == "claude_code_compact":  # the summary alone; no user message kept
        return [*system, _injected(f"{CLAUDE_CODE_CONTINUED}\n{claude_code_summary(summary)}")]
    users = [m for m in messages if m["role"] == "user" and not m.get("injected")]
    earlier = users[:-1]
    kept = select_recent_user_messages([count_tokens(m["content"]) for m in earlier], c.user_budget)
    return [*system, *(dict(earlier[i]) for i in kept),
            _injected(f"{CODEX_PREFIX}\n{summary}"), *map(dict, users[-1:])]


def _injected(content: str) -> dict:
    return {"role": "user", "content": content, "injected": True}


def claude_code_summary(text: str) -> str:
    """The ``<summary>`` body with the ``<analysis>`` stripped (the whole text without tags)."""
    text = re.sub(r"<analysis>.*?(</analysis>|$)", "", text, flags=re.DOTALL)
    m = re.search(r"<summary>(.*?)(</summary>|$)", text, flags=re.DOTALL)
    return (m.group(1) if m else text).strip()


def compact(st) -> None:
    """Close the segment of ``st`` (an ``EpisodeState``) and continue from the rebuilt context;
    a summarising strategy first plays the summary turn as a segment of its own. A rebuild that
    changes nothing, or a summary request that does not fit the window, is skipped (the
    segment goes on)."""
    loop, compaction = st.loop, st.loop.compaction

    def rebuilt_from(summary: str) -> list[dict]:
        return rebuild(compaction, st.task, st.msgs, summary, lambda s: len(loop.encode(s)))

    if not compaction.summarises:
        rebuilt = rebuilt_from("")
        if rebuilt == st.msgs:
            return
        st.close_segment()
    else:
        request = summary_request(compaction, st.msgs)
        text = st.render(request, True)
        ids = loop.encode(text)
        budget = min(loop.limits.max_new_tokens, loop.limits.max_tokens - len(ids))
        if budget <= 0:  # no room to ask for a summary: go on without compacting
            return
        st.close_segment()
        st.msgs, st.trace = request, Trace(ids, text)
        (out,) = loop.engine.generate([ids], replace(st.sampling, max_new_tokens=budget))
        summary = st.add_step(out, st.msgs, compaction.train_summary)
        st.msgs.append({"role": "assistant", "content": summary})
        st.close_segment()
        rebuilt = rebuilt_from(summary)
    st.restart(rebuilt)
    st.compactions += 1

"""A scripted agent and user that replay a tau task's gold actions through the live agent
loop: the user names its task, the agent makes its gold calls one per turn and hands over with
"Your turn." where the user has gold actions (telecom's device fixes), the user does them one
call at a time and says "Done with my part.", and the agent closes with "All done.", which the
user answers with the stop token."""

import re

from posttrain.envs.tau.tasks import load_tasks
from posttrain.envs.tau.user import user_message
from posttrain.harness import format_tool_call

HANDOVER, USER_DONE, FINISHED = "Your turn.", "Done with my part.", "All done."


def gold_actions(domain):
    return {t.id: (t.evaluation_criteria.actions or []) if t.evaluation_criteria else []
            for t in load_tasks(domain)}


def blocks(actions):
    """The gold actions as runs of the same requestor."""
    out = []
    for a in actions:
        if out and out[-1][0] == a.requestor:
            out[-1][1].append(a)
        else:
            out.append((a.requestor, [a]))
    return out


def gold_agent(domain):
    """``reply(prompt_text)`` for ``ScriptedEngine``: the agent's next gold turn."""
    actions = gold_actions(domain)

    def reply(prompt):
        named = re.search(r"calling about task <<(.*?)>>", prompt)
        task_id, since = named.group(1), prompt[named.end():]
        results = since.count("<|im_start|>tool")
        handed = since.count(USER_DONE)
        for requestor, block in blocks(actions[task_id]):
            if requestor == "user":
                if handed == 0:
                    return HANDOVER
                handed -= 1
            elif results >= len(block):
                results -= len(block)
            else:
                a = block[results]
                return format_tool_call(a.name, a.arguments)
        return FINISHED

    return reply


class GoldUser:
    """The user of one task: names it, does its gold user actions when handed over."""

    def __init__(self, task, actions):
        self.task_id, self.turn = task.id, 0
        self.user_blocks = [b for r, b in blocks(actions) if r == "user"]

    def respond(self, view):
        self.turn += 1
        texts = [m["content"] for m in view if m["role"] == "assistant"]
        if self.turn == 1:
            return user_message(f"I am calling about task <<{self.task_id}>>.", None, "u")
        if texts[-1] == FINISHED:
            return user_message("###STOP###", None, "u")
        if texts[-1] == HANDOVER:
            block = self.user_blocks[texts.count(HANDOVER) - 1]
            last_handover = max(i for i, m in enumerate(view) if m.get("content") == HANDOVER)
            done = sum(1 for m in view[last_handover:] if m["role"] == "tool")
            if done < len(block):
                a = block[done]
                return user_message(None, [{"name": a.name, "arguments": a.arguments}],
                                    f"u{self.turn}")
            return user_message(USER_DONE, None, "u")
        return user_message("Please go on.", None, "u")


def gold_users(domain):
    actions = gold_actions(domain)
    return lambda task, tools: GoldUser(task, actions[task.id])

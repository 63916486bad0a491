"""Shared pieces of the agent-loop tests: a scripted engine, a tool, a task, and a scripted
student who carries a ten only when a skill in its context says so."""

import re

from posttrain.engines import GenerationOutput
from posttrain.rewards import RewardFunction

REWARD = RewardFunction({"correct": ("numeric", 1.0)})
TASK = [{"role": "user", "content": "What is 2+3?"}]
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
QUESTION = re.compile(r"What is (\d+)\+(\d+)\?")


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


class ScriptedEngine:
    """Replies with fixed texts in turn (or ``reply(prompt_text)`` when ``replies`` is a
    function), one per prompt, and records every prompt it is given."""

    version = 0

    def __init__(self, tokenizer, replies, eos=True):
        self.tok, self.eos, self.prompts = tokenizer, eos, []
        self.replies = replies if callable(replies) else list(replies)

    def _next(self, prompt):
        if callable(self.replies):
            return self.replies(self.tok.decode(prompt))
        return self.replies.pop(0)

    def generate(self, prompts, sampling, seeds=None):
        outs = []
        for prompt in prompts:
            self.prompts.append(list(prompt))
            ids = self.tok.encode(self._next(prompt), add_special_tokens=False)
            ids = ids + [self.tok.eos_token_id] if self.eos else ids[: sampling.max_new_tokens]
            outs.append(GenerationOutput(list(prompt), ids, [-0.5] * len(ids),
                                         "stop" if self.eos else "length", 0))
        return outs

    def update_weights(self, named_tensors, version):
        pass


def no_carry(a: int, b: int) -> int:
    """The sum of a student who adds each column mod 10."""
    digits, place = 0, 1
    while a or b:
        digits += (a % 10 + b % 10) % 10 * place
        a, b, place = a // 10, b // 10, place * 10
    return digits


def student(prompt: str) -> str:
    """Carries only when a skill in its context says so; writes a skill without carrying."""
    if "Before you solve the task" in prompt:
        return "Add the numbers digit by digit."
    a, b = map(int, QUESTION.findall(prompt)[-1])
    carries = "carry" in prompt.split("<|im_start|>user")[0]  # the system message
    return f"<answer>{a + b if carries else no_carry(a, b)}</answer>"

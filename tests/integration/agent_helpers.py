"""Shared pieces of the agent-loop tests: a scripted engine, a tool, a task."""

from posttrain.engines import GenerationOutput
from posttrain.rewards import RewardFunction

REWARD = RewardFunction({"correct": ("numeric", 1.0)})
TASK = [{"role": "user", "content": "What is 2+3?"}]
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


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

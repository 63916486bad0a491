"""``AttackerEngine``: an exploit played as the policy of the real agent loop, so the attack
meets the environment's tools, verifier and guard exactly as a model's episodes do. It reads
each prompt as ChatML text (the audit's own tokenizer renders it): the opening messages once
(with ``tool_docs``, the tools' schemas, which a model's own template may show in full),
then the tool results that arrived since its last turn; the episode is the one whose last
prompt and reply the new prompt extends."""

from __future__ import annotations

import re
from collections.abc import Sequence

from posttrain.audit.exploits import Attempt, Exploit
from posttrain.engines import GenerationOutput
from posttrain.types import SamplingParams

MESSAGE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


class AttackerEngine:
    version = 0

    def __init__(self, tokenizer, exploit: Exploit, tool_docs: str = "") -> None:
        self.tokenizer, self.exploit, self.tool_docs = tokenizer, exploit, tool_docs
        self.attempts: list[tuple[list[int], Attempt]] = []  # (ids so far, the attempt)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 seeds=None) -> list[GenerationOutput]:
        return [self._one(list(p)) for p in prompts]

    def _one(self, prompt: list[int]) -> GenerationOutput:
        if known := [(ids, a) for ids, a in self.attempts if prompt[:len(ids)] == ids]:
            ids, attempt = max(known, key=lambda k: len(k[0]))
            self.attempts.remove((ids, attempt))
            new = self.tokenizer.decode(prompt[len(ids):])
            attempt.observations += [text for role, text in MESSAGE.findall(new)
                                     if role in ("tool", "user")]
            attempt.turn += 1
        else:
            attempt = Attempt(f"{self.tokenizer.decode(prompt)}\n{self.tool_docs}")
        reply = self.tokenizer.encode(self.exploit.act(attempt), add_special_tokens=False)
        reply.append(self.tokenizer.eos_token_id)
        self.attempts.append((prompt + reply, attempt))
        return GenerationOutput(prompt, reply, [0.0] * len(reply), "stop", self.version)

    def paths(self) -> set[str]:
        """The unnamed files the exploit used across its episodes."""
        return {p for _, attempt in self.attempts for p in attempt.paths}

    def update_weights(self, named_tensors, version: int) -> None:
        pass

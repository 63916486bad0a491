"""Preference pairs: from a dataset or generated from a task family, encoded as batch rows.

A row (of any file ``datasets`` reads) is ``{"prompt", "chosen", "rejected"}``: the prompt a
string (one user turn) or a list of messages, each response a string or a list with one
assistant message; or the conversational form ``{"chosen": [messages], "rejected":
[messages]}``, two conversations that share every message but the last, an assistant turn
(TRL's two preference forms). An optional ``user`` column (a string or an integer) names whose
preference the pair records (P-GenRM's prototypes, ``rm.loss: pgenrm_pair``). Malformed rows
are skipped and their indices and reasons kept.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.config.sections.reward import DEFAULT_RUBRIC
from posttrain.data.chat_formats import messages_of
from posttrain.data.conversations import conversation_segment
from posttrain.data.reading import read_rows
from posttrain.envs import ArithmeticTasks
from posttrain.models import encode_prompt
from posttrain.rewards.judge import comparison_messages, question_of
from posttrain.types import Batch, Episode, Segment


@dataclass(frozen=True)
class PreferencePair:
    prompt: tuple[dict, ...]
    chosen: str
    rejected: str
    user: str | None = None

    def conversations(self) -> tuple[list[dict], list[dict]]:
        return tuple([*self.prompt, {"role": "assistant", "content": reply}]
                     for reply in (self.chosen, self.rejected))


@dataclass
class PreferenceData:
    pairs: list[PreferencePair]
    skipped: list[tuple[int, str]] = field(default_factory=list)


def _reply(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    (message,) = messages_of(value, what)
    if message["role"] != "assistant":
        raise ValueError(f"{what} must be an assistant message")
    return message["content"]


def parse_pair(row: object) -> PreferencePair:
    """One JSONL row as a pair; ``ValueError`` names what is wrong."""
    if not isinstance(row, dict) or row.get("chosen") is None or row.get("rejected") is None:
        raise ValueError("row needs 'chosen' and 'rejected'")
    if row.get("prompt") is not None:
        prompt = messages_of(row["prompt"], "prompt")
        chosen, rejected = _reply(row["chosen"], "chosen"), _reply(row["rejected"], "rejected")
    else:
        c, r = messages_of(row["chosen"], "chosen"), messages_of(row["rejected"], "rejected")
        if c[:-1] != r[:-1] or len(c) < 2 or {c[-1]["role"], r[-1]["role"]} != {"assistant"}:
            raise ValueError("chosen and rejected conversations must share all but a final "
                             "assistant turn")
        prompt, chosen, rejected = c[:-1], c[-1]["content"], r[-1]["content"]
    if chosen == rejected:
        raise ValueError("chosen and rejected are the same response")
    user = row.get("user")
    if user is not None and (isinstance(user, bool) or not isinstance(user, str | int)):
        raise ValueError(f"'user' must be a string or an integer, not {type(user).__name__}")
    return PreferencePair(tuple(prompt), chosen, rejected, None if user is None else str(user))


def load_preference_data(path: str | Path) -> PreferenceData:
    """Pairs from the dataset at ``path``; malformed rows skipped (indices and reasons kept);
    none usable raises ``DataError``."""
    return PreferenceData(*read_rows(path, parse_pair, "preference data"))


def arithmetic_pairs(tasks: ArithmeticTasks, n: int, seed: int, split: str = "train"
                     ) -> list[PreferencePair]:
    """``n`` pairs of ``split`` problems: the worked solution over the flawed solver's (problems
    where both agree are skipped)."""
    rng = random.Random(f"pref:{seed}:{split}")
    pairs: list[PreferencePair] = []
    while len(pairs) < n:
        for p in tasks.sample(n, rng, split=split):
            chosen, rejected = p.completion(), p.completion(flawed=True)
            if chosen != rejected and len(pairs) < n:
                pairs.append(PreferencePair(tuple(p.messages()), chosen, rejected))
    return pairs


def pair_batch(tokenizer, pairs: list[PreferencePair]) -> Batch:
    """Rows ``2i`` and ``2i + 1``: pair ``i``'s chosen and rejected conversations, the loss mask
    on the assistant reply."""
    segments = [conversation_segment(tokenizer, conv) for pair in pairs
                for conv in pair.conversations()]
    return Batch.from_episodes([Episode([s]) for s in segments], tokenizer.pad_token_id)


def mismatched_batch(tokenizer, pairs: list[PreferencePair]) -> Batch:
    """Row ``i``: pair ``i``'s prompt with pair ``i + 1``'s chosen response (cyclically) —
    KTO's sample of unrelated (prompt, response) pairs for its reference point."""
    convs = [[*p.prompt, {"role": "assistant", "content": q.chosen}]
             for p, q in zip(pairs, pairs[1:] + pairs[:1])]
    return Batch.from_episodes([Episode([conversation_segment(tokenizer, c)]) for c in convs],
                               tokenizer.pad_token_id)


def comparison_batch(tokenizer, pairs: list[PreferencePair]) -> Batch:
    """Rows ``2i`` and ``2i + 1``: pair ``i`` as one comparison prompt with the chosen answer
    first (A) and with it second (B)."""
    prompts = [encode_prompt(tokenizer, comparison_messages(
        question_of(pair.prompt), a, b, DEFAULT_RUBRIC))
        for pair in pairs for a, b in ((pair.chosen, pair.rejected),
                                       (pair.rejected, pair.chosen))]
    return Batch.from_episodes([Episode([Segment.from_prompt_completion(p, [])])
                                for p in prompts], tokenizer.pad_token_id)

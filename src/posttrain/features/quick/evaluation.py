"""Quick-instruction evaluation (docs/quick_instructions.md): every row's instructions are
asked after its prompt (its messages through the last user message, with the generation
prompt) and answered greedily from the prompt's KV cache, through the engine
(``TorchEngine.generate_quick``) or through a served endpoint (``posttrain serve``'s ``quick``
field). Reported: exact-match accuracy per instruction (overall and per row ``source``) and
the prompt tokens prefilled, against a separate request per instruction (prompt + token)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from posttrain.data.chat_formats import Conversation
from posttrain.models import encode_prompt
from posttrain.models.quick_tokens import quick_token_ids
from posttrain.types import SamplingParams


@dataclass(frozen=True)
class Asked:
    """One row's answers (instruction -> text), its prompt's length in tokens and the prompt
    tokens its instructions did not prefill again."""

    answers: dict[str, str]
    prompt_tokens: int
    prefill_saved: int


def prompt_of(c: Conversation) -> list[dict]:
    """The messages a row's quick instructions follow: through the last user message."""
    return c.quick_examples()[0][:-1]


def instructions(rows: Sequence[Conversation]) -> list[str]:
    """Every instruction the rows ask, in order of first use."""
    return list(dict.fromkeys(n for c in rows for n in c.quick))


def ask_engine(engine, tokenizer, rows: Sequence[Conversation], max_tokens: int = 16
               ) -> list[Asked]:
    """Each row's instructions answered by ``engine`` (one reply token sampled greedily)."""
    names = instructions(rows)
    prompts = [encode_prompt(tokenizer, prompt_of(c), True, c.tools) for c in rows]
    outs = engine.generate_quick(prompts, SamplingParams(max_new_tokens=1, temperature=0.0),
                                 quick_token_ids(tokenizer, names), max_tokens, at="prompt")
    return [Asked({n: tokenizer.decode(a, skip_special_tokens=True)
                   for n, a in zip(names, o.answers)}, len(p), o.prefill_saved)
            for p, o in zip(prompts, outs)]


def ask_served(client, model: str, rows: Sequence[Conversation]) -> list[Asked]:
    """Each row's instructions answered by a served model through ``client`` (the official
    ``openai`` client's chat completions, ``quick`` as an extra body field)."""
    names, asked = instructions(rows), []
    for c in rows:
        r = client.chat.completions.create(model=model, messages=prompt_of(c), max_tokens=1,
                                           temperature=0.0, tools=c.tools or None,
                                           extra_body={"quick": names})
        quick = (r.model_extra or {})["quick"]
        asked.append(Asked(quick["answers"], r.usage.prompt_tokens, quick["prefill_saved"]))
    return asked


def report(rows: Sequence[Conversation], sources: Sequence[str], asked: Sequence[Asked]
           ) -> dict:
    """Accuracy per instruction (overall and per source) and the prefill figures."""
    hits: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for c, source, a in zip(rows, sources, asked):
        for name, want in c.quick.items():
            right = a.answers.get(name, "").strip() == want.strip()
            hits["all"][name].append(right)
            hits[source][name].append(right)

    def rates(by_name: dict[str, list[bool]]) -> dict[str, float]:
        return {n: round(sum(h) / len(h), 4) for n, h in by_name.items()}

    n_asked = len(instructions(rows))
    return {"rows": len(rows), "instructions": instructions(rows),
            "accuracy": rates(hits.pop("all")),
            "accuracy_by_source": {s: rates(h) for s, h in sorted(hits.items())},
            "prefill_tokens": {
                "separate_requests": sum(n_asked * (a.prompt_tokens + 1) for a in asked),
                "quick": n_asked * len(asked),
                "saved": sum(a.prefill_saved for a in asked)}}

"""Quick-instruction tokens (DeepSeek-V4 technical report, 2026): special tokens that, appended to
a rendered prompt, ask the model an auxiliary question (``<action>``: does this need a search;
``<query>``: the search query; ``<domain>``: the subject) that it answers from the prompt's KV
cache (``TorchEngine.generate_quick``), its answer closed by eos.

A quick instruction's sequence is ``prompt + [token] + answer + [eos]``, where ``prompt`` is
the conversation rendered with the generation prompt, as for sampling its reply: the same cache
serves the answer and the reply. No chat template changes, so any model's template works."""

from __future__ import annotations

import re
from collections.abc import Sequence

from posttrain.types import DataError

QUICK_ROLE = "quick"  # a conversation's last message asking one (``models.chat``)
QUICK_TOKENS = ("<action>", "<query>", "<authority>", "<domain>", "<title>", "<extracted_url>")
NAME = re.compile(r"<[A-Za-z][\w-]*>")


class MissingQuickTokens(DataError):
    """The data (or a request) asks a quick instruction the tokenizer has no token for."""


def quick_token_ids(tokenizer, names: Sequence[str]) -> list[int]:
    """The ids of quick instructions ``names``; ``MissingQuickTokens`` names any the tokenizer
    lacks (or splits into several tokens)."""
    vocab = tokenizer.get_vocab()
    missing = [n for n in names if n not in vocab]
    if missing:
        raise MissingQuickTokens(
            f"the tokenizer has no quick-instruction token {', '.join(missing)}: add them with "
            "model.quick_tokens (docs/quick_instructions.md)")
    return [vocab[n] for n in names]


def add_quick_tokens(tokenizer, model, names: Sequence[str] = QUICK_TOKENS) -> list[str]:
    """Add the quick instructions ``names`` that ``tokenizer`` lacks as special tokens, grow
    ``model``'s embeddings (and an untied output layer) to hold them if needed, and start
    their rows at the mean of the others' (each new token begins as an average token).
    Returns the names added."""
    import torch  # the config imports the names above without it

    missing = [n for n in names if n not in tokenizer.get_vocab()]
    if not missing:
        return []
    tokenizer.add_special_tokens({"additional_special_tokens": missing},
                                 replace_extra_special_tokens=False)
    ids = torch.tensor(quick_token_ids(tokenizer, missing))
    if int(ids.max()) >= model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    weights = {id(w): w for w in (model.get_input_embeddings().weight,
                                   getattr(model.get_output_embeddings(), "weight", None))
               if w is not None}  # one tensor when tied
    with torch.no_grad():
        for w in weights.values():
            old = torch.ones(w.shape[0], dtype=torch.bool)
            old[ids] = False
            w[ids] = w[old].mean(dim=0)
    return missing


def has_quick_tokens(model_dir, names: Sequence[str]) -> bool:
    """Whether the tokenizer at ``model_dir`` has every one of ``names``."""
    from posttrain.models.loading import load_tokenizer

    vocab = load_tokenizer(model_dir).get_vocab()
    return all(n in vocab for n in names)


def with_quick_tokens(model_dir, out_dir, names: Sequence[str]) -> None:
    """The model at ``model_dir`` written to ``out_dir`` with the quick instructions
    ``names`` added (``add_quick_tokens``)."""
    from posttrain.models.loading import load_model, load_tokenizer, save_model

    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    add_quick_tokens(tokenizer, model, names)
    save_model(model, tokenizer, out_dir)

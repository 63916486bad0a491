"""Render chat conversations to token ids with an assistant-only loss mask. A conversation may
end with a quick instruction (``{"role": "quick", "name": "<action>", "content": answer}``,
``models.quick_tokens``): the messages before it as a prompt, the token, then the answer and
eos, the answer and eos trained."""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.models.quick_tokens import QUICK_ROLE, quick_token_ids
from posttrain.types import ChatTemplateError


def encode_prompt(
    tokenizer, messages: Sequence[dict], add_generation_prompt: bool = True,
    tools: list[dict] | None = None, continue_final: bool = False,
):
    """Token ids of ``messages`` rendered with the chat template (and ``tools`` schemas);
    ``continue_final``: the last (assistant) message left open, to be continued."""
    text = render_prompt(tokenizer, messages, add_generation_prompt, tools, continue_final)
    return tokenizer.encode(text, add_special_tokens=False)


def render_prompt(
    tokenizer, messages: Sequence[dict], add_generation_prompt: bool = True,
    tools: list[dict] | None = None, continue_final: bool = False,
) -> str:
    """The text ``encode_prompt`` encodes; ``ChatTemplateError`` if the tokenizer has no chat
    template (a base model), naming where one goes."""
    if not tokenizer.chat_template:
        where = tokenizer.name_or_path or "the model directory"
        raise ChatTemplateError(
            f"the tokenizer of {where} has no chat template (a base model?): posttrain renders "
            f"every prompt as a chat; write one to {where}/chat_template.jinja "
            "(docs/real_models.md, \"A base model\")")
    return tokenizer.apply_chat_template(
        list(messages), tools=tools, tokenize=False,
        add_generation_prompt=add_generation_prompt and not continue_final,
        continue_final_message=continue_final,
    )


def encode_chat(
    tokenizer, messages: Sequence[dict], tools: list[dict] | None = None
) -> tuple[list[int], list[int]]:
    """``(token_ids, loss_mask)`` of a conversation; mask is 1 on assistant tokens only.

    Each assistant turn is rendered as ``prefix + generation prompt`` (mask 0) followed by the
    assistant content and the tokens the template closes it with (mask 1), so the trained tokens
    are exactly those a model would generate after the generation prompt: the content through
    the first eos token (what the template adds after eos, such as a newline, stays masked).
    """
    if not messages:
        raise ValueError("a conversation needs at least one message")
    if messages[-1].get("role") == QUICK_ROLE:
        return encode_quick(tokenizer, messages[:-1], messages[-1]["name"],
                            messages[-1]["content"], tools)
    ids: list[int] = []
    mask: list[int] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise ValueError(f"message {i} must be a dict with 'role' and 'content'")
        prompt = (encode_prompt(tokenizer, messages[:i], True, tools)
                  if msg["role"] == "assistant" else ids)
        full = encode_prompt(tokenizer, messages[: i + 1], False, tools)
        if full[: len(ids)] != ids or full[: len(prompt)] != prompt:
            raise ChatTemplateError(f"chat template is not prefix-stable at message {i}; "
                                    "cannot mask per turn")
        mask += [0] * (len(prompt) - len(ids))
        mask += _assistant_mask(full[len(prompt) :], tokenizer.eos_token_id, msg["role"])
        ids = full
    return ids, mask


def _assistant_mask(span: list[int], eos_id: int | None, role: str) -> list[int]:
    if role != "assistant":
        return [0] * len(span)
    end = span.index(eos_id) + 1 if eos_id in span else len(span)
    return [1] * end + [0] * (len(span) - end)


def encode_quick(tokenizer, messages: Sequence[dict], name: str, answer: str,
                 tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
    """``(token_ids, loss_mask)`` of quick instruction ``name`` answered ``answer`` after
    ``messages`` (rendered with the generation prompt): the answer and eos are trained."""
    prompt = encode_prompt(tokenizer, messages, True, tools) + quick_token_ids(tokenizer, [name])
    answer_ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt + answer_ids, [0] * len(prompt) + [1] * len(answer_ids)


def stop_tokens(tokenizer) -> tuple[int, ...]:
    """The token ids that end a reply of the model ``tokenizer`` belongs to: those
    ``load_tokenizer`` found (its eos and the model's generation config's), else its eos."""
    return getattr(tokenizer, "stop_token_ids", None) or (tokenizer.eos_token_id,)

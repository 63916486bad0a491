"""Quick-instruction tokens (docs/quick_instructions.md): added to a tokenizer and a model
without changing anything the model computed before, each new row the mean of the old ones;
a conversation ending with a quick instruction encodes as prompt + token + answer + eos, only
the answer and eos trained; rows carry their answers and expand into one example each."""

import json

import pytest
import torch

from posttrain.data.chat_formats import conversation
from posttrain.data.conversations import load_chat_data, quick_instructions
from posttrain.models import build_tiny, encode_prompt, load_model, load_tokenizer
from posttrain.models.chat import encode_chat
from posttrain.models.quick_tokens import (
    QUICK_TOKENS,
    MissingQuickTokens,
    add_quick_tokens,
    has_quick_tokens,
    quick_token_ids,
    with_quick_tokens,
)

USER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("quick_tokens") / "m", "nano")


def test_adding_the_tokens_keeps_every_old_logit_and_starts_them_at_the_mean(plain):
    tok, model = load_tokenizer(plain), load_model(plain)
    old_rows = model.get_input_embeddings().weight.detach().clone()
    ids = torch.tensor([encode_prompt(tok, USER)])
    before = model(input_ids=ids).logits
    assert add_quick_tokens(tok, model, ["<action>", "<domain>"]) == ["<action>", "<domain>"]
    action, domain = quick_token_ids(tok, ["<action>", "<domain>"])
    assert (action, domain) == (len(old_rows), len(old_rows) + 1)
    rows = model.get_input_embeddings().weight
    assert torch.equal(rows[: len(old_rows)], old_rows)
    torch.testing.assert_close(rows[action], old_rows.double().mean(0).float())
    assert model.get_output_embeddings().weight.data_ptr() == rows.data_ptr()  # still tied
    after = model(input_ids=ids).logits  # the same states times the same rows: at most
    torch.testing.assert_close(after[..., : len(old_rows)], before)  # a reordered 64-term sum
    assert tok.encode("<action>", add_special_tokens=False) == [action]  # one special token
    assert add_quick_tokens(tok, model, ["<action>", "<query>"]) == ["<query>"]


def test_a_model_is_copied_with_the_tokens_it_lacks(plain, tmp_path):
    assert not has_quick_tokens(plain, ["<action>"])
    with_quick_tokens(plain, tmp_path / "q", QUICK_TOKENS)
    assert has_quick_tokens(tmp_path / "q", QUICK_TOKENS)
    model = load_model(tmp_path / "q")
    assert model.config.vocab_size == len(load_tokenizer(plain)) + len(QUICK_TOKENS)
    with pytest.raises(MissingQuickTokens, match="<action>, <query>: add them with "
                                                 "model.quick_tokens"):
        quick_token_ids(load_tokenizer(plain), ["<action>", "<query>"])


def test_a_quick_instruction_trains_its_answer_and_eos_only(plain, tmp_path):
    tok = load_tokenizer(plain)
    add_quick_tokens(tok, load_model(plain), ["<query>"])
    ids, mask = encode_chat(tok, [*USER, {"role": "quick", "name": "<query>",
                                          "content": "two plus three"}])
    prompt = encode_prompt(tok, USER)
    answer = tok.encode("two plus three", add_special_tokens=False) + [tok.eos_token_id]
    assert ids == prompt + quick_token_ids(tok, ["<query>"]) + answer
    assert mask == [0] * (len(prompt) + 1) + [1] * len(answer)


def test_rows_carry_quick_answers_asked_after_the_last_user_message(tmp_path):
    reply = {"role": "assistant", "content": "5"}
    c = conversation({"messages": [*USER, reply], "quick": {"<action>": "answer",
                                                             "<query>": None}})
    assert c.quick == {"<action>": "answer"}  # a null: another row's instruction
    assert c.quick_examples() == [[*USER, {"role": "quick", "name": "<action>",
                                           "content": "answer"}]]
    assert conversation({"messages": USER, "quick": {"<domain>": "math"}}).messages == USER
    for row, error in [({"messages": USER}, "no assistant message"),
                       ({"messages": USER, "quick": {"action": "x"}}, "quick must map"),
                       ({"messages": USER, "quick": {"<action>": 3}}, "quick must map"),
                       ({"messages": USER[:1], "quick": {"<action>": "x"}}, "after a user")]:
        with pytest.raises(ValueError, match=error):
            conversation(row)
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"messages": [*USER, reply], "quick": {"<action>": "answer",
                                                                      "<domain>": "math"}})
                    + "\n" + json.dumps({"messages": USER, "quick": {"<query>": "none"}}) + "\n")
    data = load_chat_data(path)
    assert [c[-1]["role"] for c in data.conversations] == ["assistant", "quick", "quick",
                                                            "quick"]
    assert quick_instructions(data) == ["<action>", "<domain>", "<query>"]
    assert len(data.tools) == 4


def test_a_run_starts_from_its_path_model_copied_with_the_tokens_it_lacks(plain, tmp_path):
    from posttrain.config import load_config
    from posttrain.recipes.build import RunParts

    def start(path, out):
        return RunParts(load_config(None, [f"model.path={path}", "model.preset=null",
                                           "model.quick_tokens=[<action>]",
                                           f"out_dir={out}"])).base_model_dir()

    copied = start(plain, tmp_path / "a")
    assert copied == tmp_path / "a" / "base_model" and has_quick_tokens(copied, ["<action>"])
    assert start(copied, tmp_path / "b") == copied  # a model that has them is used as it is

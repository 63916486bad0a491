"""Quick instructions through ``posttrain serve`` (its ``quick`` extension field) with the
official ``openai`` and ``anthropic`` clients: the answers are the engine's
``generate_quick`` answers to the same prompt, the choices those of a request without
``quick``, and the prefill saved is the prompt once per instruction; the instruction-less
engines and unknown tokens are refused with a 400 naming ``quick``."""

import json

import anthropic
import openai
import pytest
import torch
from serve_helpers import Scripted, served

from posttrain.data.chat_formats import conversation
from posttrain.engines import TorchEngine
from posttrain.features.quick.evaluation import Asked, ask_served
from posttrain.models import build_tiny, encode_prompt, load_model, load_tokenizer
from posttrain.models.quick_tokens import QUICK_TOKENS, quick_token_ids
from posttrain.types import SamplingParams

USER = [{"role": "user", "content": "How many inhabitants does Faldragan have?"}]
ASKED = ["<action>", "<query>"]


@pytest.fixture(scope="module")
def quick_model(tmp_path_factory):
    d = build_tiny(tmp_path_factory.mktemp("quick_serve") / "m", "nano",
                   quick_tokens=QUICK_TOKENS)
    model, tok = load_model(d), load_tokenizer(d)
    with torch.no_grad():  # peaked distributions (the answers are not near ties), and
        for p in model.parameters():  # instructions that differ from their shared mean start
            p.mul_(3)
        rows = model.get_input_embeddings().weight
        ids = quick_token_ids(tok, QUICK_TOKENS)
        rows[ids] = torch.randn(len(ids), rows.shape[1],
                                generator=torch.Generator().manual_seed(0)) * rows.std()
    return model, tok


def client_of(url):
    return openai.OpenAI(base_url=url, api_key="quick", max_retries=0)


def test_served_answers_are_the_engines_and_leave_the_choices_alone(quick_model):
    model, tok = quick_model
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    prompt = encode_prompt(tok, USER)
    direct = engine.generate_quick([prompt], SamplingParams(max_new_tokens=8, seed=3),
                                   quick_token_ids(tok, ASKED), 16)[0]
    want = {n: tok.decode(a, skip_special_tokens=True) for n, a in zip(ASKED, direct.answers)}
    assert want["<action>"] != want["<query>"]
    with served(engine, tok) as (url, _):
        client = client_of(url)
        asked = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8,
                                               seed=3, n=2, extra_body={"quick": ASKED})
        plain = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8,
                                               seed=3, n=2)
        assert asked.model_extra["quick"] == {"answers": want,
                                              "prefill_saved": 2 * len(prompt)}
        assert [c.message.content for c in asked.choices] == \
            [c.message.content for c in plain.choices]
        assert "quick" not in (plain.model_extra or {})
        stream = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8,
                                                seed=3, stream=True, extra_body={"quick": ASKED})
        assert [c.model_extra.get("quick") for c in stream][-1]["answers"] == want
        message = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="quick",
                                      max_retries=0).messages.create(
            model="tiny", max_tokens=8, messages=USER, extra_body={"quick": ASKED})
        assert message.model_extra["quick"]["answers"] == want
        row = conversation({"messages": USER, "quick": dict.fromkeys(ASKED, "x")})
        assert ask_served(client, "tiny", [row]) == [Asked(want, len(prompt), 2 * len(prompt))]


@pytest.mark.parametrize(("engine_of", "error"), [
    (lambda m, t: TorchEngine(m, t.pad_token_id, t.eos_token_id), "no quick-instruction token "
                                                                  "<nope>"),
    (lambda m, t: TorchEngine(m, t.pad_token_id, t.eos_token_id, fast=False), "fast decoder"),
    (lambda m, t: Scripted(t, ["hi"]), "does not answer quick instructions")])
def test_what_cannot_answer_is_refused_naming_quick(quick_model, engine_of, error):
    model, tok = quick_model
    names = ["<nope>"] if "nope" in error else ASKED
    with served(engine_of(model, tok), tok) as (url, _):
        with pytest.raises(openai.BadRequestError) as caught:
            client_of(url).chat.completions.create(model="tiny", messages=USER, max_tokens=4,
                                                   extra_body={"quick": names})
    body = json.loads(caught.value.response.text)["error"]
    assert body["param"] == "quick" and error in body["message"]

"""Quick instructions (ALGORITHMS.md §14): after each prompt, or each prompt and its
completion, every instruction token continues the sequence's KV cache and is answered greedily.
The answers are those of a separate request that prefills the whole sequence again, the
completions those of plain ``generate``, whether a row stopped or ran out of tokens, in one
batch or several, with repeated prompts or not."""

import pytest
import torch

from posttrain.engines import TorchEngine
from posttrain.models import build_tiny, load_model
from posttrain.models.mtp import MTPHead
from posttrain.types import SamplingParams

PROMPTS = [[5, 9, 13, 2], [7], [5, 9, 13, 2], [11, 3, 3, 8, 21, 40]]
QUICK = [6, 17]  # any two ids stand for instruction tokens here


@pytest.fixture(scope="module")
def sharp(tmp_path_factory):
    """A nano model with weights scaled up (peaked distributions, few near ties), a token
    its samples reach and, per ``at``, one its answers reach (to stop on)."""
    model = load_model(build_tiny(tmp_path_factory.mktemp("quick") / "m", "nano"))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3)
    probe = {at: TorchEngine(model, pad_token_id=0).generate_quick(
        PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=12, seed=5), QUICK, 6, at=at)
        for at in ("completion", "prompt")}
    return model, (probe["completion"][0].output.token_ids[3],
                   {at: outs[1].answers[0][2] for at, outs in probe.items()})


@pytest.mark.parametrize(("at", "max_batch_size"),
                         [("completion", 256), ("completion", 3), ("prompt", 256), ("prompt", 3)])
def test_answers_are_a_separate_requests_and_completions_plain_generates(sharp, at,
                                                                        max_batch_size):
    model, (eos, stops) = sharp
    stop = stops[at]
    engine = TorchEngine(model, pad_token_id=0, eos_token_id=eos,
                         max_batch_size=max_batch_size)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5, stop_token_ids=[stop])
    outs = engine.generate_quick(PROMPTS, sampling, QUICK, max_quick_tokens=6, at=at)
    assert [o.output for o in outs] == engine.generate(PROMPTS, sampling)
    assert {o.output.finish_reason for o in outs} == {"stop", "length"}
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=[stop])
    asked = [o.output.prompt_ids + (o.output.token_ids if at == "completion" else [])
             for o in outs]
    for o, sequence in zip(outs, asked):
        separate = engine.generate([sequence + [q] for q in QUICK], greedy)
        assert o.answers == [s.token_ids for s in separate]
        assert o.prefill_saved == 2 * (len(sequence) - (at == "completion"))
    assert any(a[-1] in (eos, stop) for o in outs for a in o.answers)  # answers stop too
    # no near tie on any answer's path that rounding could tip (else equality were luck)
    with torch.no_grad():
        for o, sequence in zip(outs, asked):
            for q, a in zip(QUICK, o.answers):
                ids = torch.tensor([sequence + [q] + a])
                top2 = model(input_ids=ids).logits[0, -len(a) - 1 : -1].topk(2).values
                assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-3


def test_quick_instructions_need_the_fast_decoder_without_a_draft(sharp):
    model, _ = sharp
    with pytest.raises(ValueError, match="fast decoder"):
        TorchEngine(model, pad_token_id=0, fast=False).generate_quick(
            PROMPTS, SamplingParams(), QUICK)
    with pytest.raises(ValueError, match="fast decoder"):
        TorchEngine(model, pad_token_id=0, draft=MTPHead.for_model(model)).generate_quick(
            PROMPTS, SamplingParams(), QUICK)
    with pytest.raises(ValueError, match="at least one instruction"):
        TorchEngine(model, pad_token_id=0).generate_quick(PROMPTS, SamplingParams(), [])
    with pytest.raises(ValueError, match="at: one of prompt, completion"):
        TorchEngine(model, pad_token_id=0).generate_quick(PROMPTS, SamplingParams(), QUICK,
                                                          at="answer")

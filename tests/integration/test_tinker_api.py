"""``posttrain tinker-serve`` driven by the unmodified ``tinker`` SDK: a LoRA training client's
supervised steps, the trainer's log-probs against the sampler's, a custom loss (the SDK's
forward then weighted backward), an RL step with the sampler's log-probs, a saved state that
resumes exactly, refusals that reach the client as errors, and a step on non-finite gradients
that leaves the adapter as it was."""

import math
import os
import threading
import time

import pytest
import tinker
import torch
from tinker import types

from posttrain.models import build_tiny, load_model
from posttrain.serve.server import running
from posttrain.tinker_api.adapters import AdapterPool, LoraSpec
from posttrain.tinker_api.app import create_app
from posttrain.tinker_api.service import Service
from posttrain.tinker_api.wire import Datum


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(base_url, service, app)`` of a server of a nano Qwen3 named ``tiny`` (512
    positions)."""
    os.environ["TINKER_TELEMETRY"] = "0"
    root = tmp_path_factory.mktemp("tinker")
    service = Service(build_tiny(root / "model", "nano", architecture="qwen3"), "tiny",
                      root / "checkpoints")
    app = create_app(service)
    with running(app) as url:
        yield url.removesuffix("/v1"), service, app


@pytest.fixture(scope="module")
def client(served):
    return tinker.ServiceClient(base_url=served[0], api_key="tml-test")


def sft_datum(tok, text="What is 2+3? 5"):
    ids = tok.encode(text)
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": ids[1:],
                                       "weights": [0.0] * 4 + [1.0] * (len(ids) - 5)})


def test_supervised_steps_lower_the_loss_and_the_sampler_scores_as_the_trainer(client):
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    datum = sft_datum(tc.get_tokenizer())
    losses = []
    for _ in range(8):
        fb = tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=3e-3)).result()
        result = fb.result()
        logprobs = torch.tensor(result.loss_fn_outputs[0]["logprobs"].tolist())
        weights = torch.tensor(datum.loss_fn_inputs["weights"].tolist())
        # the reported loss is its definition over the returned log-probs
        assert result.metrics["loss:sum"] == pytest.approx(float(-(weights * logprobs).sum()),
                                                           rel=1e-5)
        losses.append(result.metrics["loss:sum"])
    assert losses[-1] < 0.85 * losses[0]  # 30.8 -> 25.0 (nats, five answer tokens)
    trained = torch.tensor(tc.forward([datum], "cross_entropy").result()
                           .loss_fn_outputs[0]["logprobs"].tolist())
    sampler = tc.save_weights_and_get_sampling_client().result()
    tokens = datum.model_input.to_ints() + [datum.loss_fn_inputs["target_tokens"].tolist()[-1]]
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
    assert scored[0] is None
    # the engine with the adapter merged gives the trainer's log-probs (fp32 rounding)
    torch.testing.assert_close(torch.tensor(scored[1:]), trained, atol=1e-4, rtol=0)
    base = client.create_sampling_client(base_model="tiny").result()
    assert base.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[-1] \
        < scored[-1]  # the base model did not learn the answer


def test_a_custom_loss_trains_through_forward_and_weighted_backward(client):
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=1).result()
    datum = sft_datum(tc.get_tokenizer(), "What is 4+4? 8")

    def last_token_nll(data, logprobs):
        loss = -logprobs[0][-1]
        return loss, {"nll": float(loss)}
    first = tc.forward_backward_custom([datum], last_token_nll).result()
    for _ in range(4):
        tc.optim_step(types.AdamParams(learning_rate=2e-2)).result()
        last = tc.forward_backward_custom([datum], last_token_nll).result()
    assert last.metrics["nll"] < first.metrics["nll"]


def test_an_rl_step_on_policy_has_ratio_one(client):
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=2).result()
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tc.get_tokenizer().encode("What is 1+1?"))
    out = sampler.sample(prompt, num_samples=4, sampling_params=types.SamplingParams(
        max_tokens=6, temperature=1.0, seed=3)).result()
    data, total = [], 0.0
    for i, seq in enumerate(out.sequences):
        tokens = prompt.to_ints() + seq.tokens
        n_prompt = prompt.length
        advantage = float(i % 2) - 0.5
        total += advantage * len(seq.tokens)
        data.append(types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:],
                            "logprobs": [0.0] * (n_prompt - 1) + seq.logprobs,
                            "advantages": [0.0] * (n_prompt - 1) + [advantage] * len(seq.tokens)}))
    for loss_fn in ("importance_sampling", "ppo"):
        result = tc.forward(data, loss_fn).result()
        # on policy every ratio is 1: the loss is -sum of the advantages
        assert result.metrics["loss:sum"] == pytest.approx(-total, abs=1e-3)
    for loss_fn, beta in (("cispo", 0.0), ("dro", 0.5)):
        result = tc.forward(data, loss_fn, {"beta": beta}).result()
        lps = [o["logprobs"].tolist() for o in result.loss_fn_outputs]
        # the sampled tokens' ratio is 1: -sum (lp A - beta/2 (lp - q)^2), where dro's
        # penalty falls on the prompt tokens (q = 0 there), as Tinker's formula has it
        expected = -sum(lp * a - beta / 2 * (lp - q) ** 2 for d, row in zip(data, lps)
                        for lp, a, q in zip(row, d.loss_fn_inputs["advantages"].tolist(),
                                            d.loss_fn_inputs["logprobs"].tolist()))
        assert result.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4)


def test_a_saved_state_resumes_exactly(client):
    def steps(tc, datum, n):
        for _ in range(n):
            tc.forward_backward([datum], "cross_entropy").result()
            tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()

    def logprobs(tc, datum):
        return tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"] \
            .tolist()
    straight = client.create_lora_training_client(base_model="tiny", rank=4, seed=5).result()
    datum = sft_datum(straight.get_tokenizer())
    steps(straight, datum, 2)
    first = client.create_lora_training_client(base_model="tiny", rank=4, seed=5).result()
    steps(first, datum, 1)
    path = first.save_state("one").result().path
    assert path.startswith("tinker://") and path.endswith("/weights/one")
    resumed = client.create_training_client_from_state_with_optimizer(path).result()
    steps(resumed, datum, 1)
    assert logprobs(resumed, datum) == logprobs(straight, datum)


def test_a_step_on_non_finite_gradients_leaves_the_adapter_as_it_was(served):
    """The client's ``Trainer`` skips it, as it skips any posttrain step whose gradient norm
    is not finite (AdamW's step on them wrote NaN into every weight of the adapter)."""
    pool = AdapterPool(load_model(served[1].model_dir))
    pool.create("c", LoraSpec(rank=4, seed=0))
    ids = served[1].tokenizer.encode("What is 2+3? 5")
    n = len(ids) - 1

    def datum(weight: float) -> Datum:
        return Datum(ids[:-1], {"target_tokens": torch.tensor(ids[1:]),
                                "weights": torch.full((n,), weight)})

    def adapter() -> list[torch.Tensor]:
        return [p.detach().clone() for p in pool.slot("c").params.values()]

    before = adapter()
    pool.forward_backward("c", [datum(math.nan)], "cross_entropy", {}, False)
    assert math.isnan(pool.optim_step("c", 3e-3)["grad_norm:mean"])
    assert all(torch.equal(a, b) for a, b in zip(adapter(), before))
    pool.forward_backward("c", [datum(1.0)], "cross_entropy", {}, False)
    assert math.isfinite(pool.optim_step("c", 3e-3)["grad_norm:mean"])
    assert not all(torch.equal(a, b) for a, b in zip(adapter(), before))  # it trains on


def test_refusals_reach_the_client(client):
    with pytest.raises(Exception, match="serves 'tiny'"):
        client.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
    tc = client.create_lora_training_client(base_model="tiny", rank=4).result()
    datum = sft_datum(tc.get_tokenizer())
    with pytest.raises(Exception, match="this server has"):
        tc.forward_backward([datum], "gspo").result()
    n = len(datum.loss_fn_inputs["target_tokens"].tolist())
    rl = types.Datum(model_input=datum.model_input, loss_fn_inputs={
        "target_tokens": datum.loss_fn_inputs["target_tokens"], "logprobs": [0.0] * n,
        "advantages": [1.0] * n})
    with pytest.raises(Exception, match="needs loss_fn_config beta"):
        tc.forward_backward([rl], "dro").result()
    image = types.Datum(model_input=types.ModelInput(chunks=[
        types.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=2),
        types.EncodedTextChunk(tokens=[1, 2])]), loss_fn_inputs={"target_tokens": [1, 2, 3, 4]})
    with pytest.raises(Exception, match="takes text"):
        tc.forward_backward([image], "cross_entropy").result()
    # a refused request used its turn: the client's next ones run
    assert tc.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"] > 0
    with pytest.raises(Exception, match="no checkpoint"):
        client.create_sampling_client(model_path="tinker://nobody/sampler_weights/x").result()


def test_a_stop_string_ends_a_sequence_at_the_token_that_completes_it(client):
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=7).result()
    tok = tc.get_tokenizer()
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tok.encode("What is"))
    free = sampler.sample(prompt, num_samples=8, sampling_params=types.SamplingParams(
        max_tokens=24, seed=11)).result()
    # a stop string this model does produce: two characters from the middle of a sample
    text = tok.decode(free.sequences[0].tokens)
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = sampler.sample(prompt, num_samples=8, sampling_params=types.SamplingParams(
        max_tokens=24, seed=11, stop=[stop])).result()
    assert any(s.stop_reason == "stop" for s in cut.sequences)
    for whole, seq in zip(free.sequences, cut.sequences):
        assert whole.tokens[:len(seq.tokens)] == seq.tokens  # the same draws, cut
        assert seq.logprobs == pytest.approx(whole.logprobs[:len(seq.tokens)])
        if seq.stop_reason == "stop" and len(seq.tokens) < len(whole.tokens):
            assert stop in tok.decode(seq.tokens) and stop not in tok.decode(seq.tokens[:-1])


def test_adapters_on_different_layers_sample_as_they_train(client):
    """Two clients, one without MLP adapters: each sampler merges its own adapter only."""
    for train_mlp in (False, True):
        tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=9,
                                                train_mlp=train_mlp).result()
        datum = sft_datum(tc.get_tokenizer(), "What is 3+3? 6")
        for _ in range(2):
            tc.forward_backward([datum], "cross_entropy").result()
            tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        trained = tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
        tokens = datum.model_input.to_ints() + [datum.loss_fn_inputs["target_tokens"].tolist()[-1]]
        scored = tc.save_weights_and_get_sampling_client().result().compute_logprobs(
            types.ModelInput.from_ints(tokens)).result()
        torch.testing.assert_close(torch.tensor(scored[1:]), torch.tensor(trained.tolist()),
                                   atol=1e-4, rtol=0)


def reference_logprobs(service, tokens) -> torch.Tensor:
    """``[len(tokens) - 1, V]`` next-token log-probs of the base model, in float64."""
    model = load_model(service.model_dir).double()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1]
    return torch.log_softmax(logits, dim=-1)


def test_top_k_and_target_log_probs_are_the_models_distribution(client, served):
    """A base sampler's prompt top-k, its samples' top-k, chosen targets (sparse, with an
    empty cell) and the last-N prompt log-probs, against the model's float64 distribution
    (float32 forward: 1e-4)."""
    prompt = [5, 17, 42, 9, 3, 28, 11]
    sampler = client.create_sampling_client(base_model="tiny").result()
    targets = torch.tensor([[7, -1], [1, 2], [3, -1], [4, 5], [6, 7], [8, 9]])
    reply = sampler.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=4, seed=1),
        include_prompt_logprobs=True, topk_prompt_logprobs=5, topk_sample_logprobs=3,
        target_prompt_logprobs=types.TensorData.from_torch_sparse(targets, pad_value=-1),
        prompt_logprobs_last_n=4).result()
    ref = reference_logprobs(served[1], prompt)
    assert reply.topk_prompt_logprobs[:3] == [None] * 3  # before the last 4 positions
    for position in range(3, len(prompt)):
        top = reply.topk_prompt_logprobs[position]
        values, ids = ref[position - 1].topk(5)
        assert [t for t, _ in top] == ids.tolist()
        torch.testing.assert_close(torch.tensor([lp for _, lp in top], dtype=torch.float64),
                                   values, atol=1e-4, rtol=0)
        assert reply.prompt_logprobs[position] == pytest.approx(
            float(ref[position - 1, prompt[position]]), abs=1e-4)
    assert reply.prompt_logprobs[:3] == [None] * 3
    picked = ref.gather(-1, targets.clamp(min=0)).where(targets >= 0, 0.0)
    torch.testing.assert_close(reply.target_prompt_logprobs.to_torch().double(), picked,
                               atol=1e-4, rtol=0)
    for sequence in reply.sequences:
        full = prompt + sequence.tokens
        ref = reference_logprobs(served[1], full)
        assert len(sequence.topk_logprobs) == len(sequence.tokens)
        for j, top in enumerate(sequence.topk_logprobs):
            values, ids = ref[len(prompt) + j - 1].topk(3)
            assert [t for t, _ in top] == ids.tolist()
            torch.testing.assert_close(torch.tensor([lp for _, lp in top],
                                                    dtype=torch.float64), values,
                                       atol=1e-4, rtol=0)


def test_alternative_prompt_tokens_are_draws_from_the_models_distribution(client, served):
    """``prompt_alt_tokens_k``: ``k`` draws at each prompt position after the first, at the
    request's temperature and from its seed, each with the model's log-prob. At temperature 1
    the first position's 4,000 draws match its distribution (5 standard errors: at most
    0.04 for any token); at temperature 0 every draw is the likeliest token."""
    prompt = [5, 17, 42, 9]
    sampler = client.create_sampling_client(base_model="tiny").result()

    def alternatives(k, **params):
        reply = sampler.sample(types.ModelInput.from_ints(prompt), 1,
                               types.SamplingParams(max_tokens=1, **params),
                               prompt_alt_tokens_k=k).result()
        alt = reply.prompt_alt_tokens
        return alt.tokens.to_torch(), alt.logprobs.to_torch().double()

    ref = reference_logprobs(served[1], prompt)
    tokens, logprobs = alternatives(4000, temperature=1.0, seed=11)
    assert tokens.shape == (3, 4000)
    torch.testing.assert_close(logprobs, ref.gather(-1, tokens), atol=1e-4, rtol=0)
    assert torch.equal(alternatives(4000, temperature=1.0, seed=11)[0], tokens)  # its seed
    frequency = torch.bincount(tokens[0], minlength=ref.shape[1]).double() / 4000
    assert (frequency - ref[0].exp()).abs().max() < 0.04
    greedy, _ = alternatives(3, temperature=0.0)
    assert torch.equal(greedy, ref.argmax(-1, keepdim=True).expand(-1, 3))


def test_k_targets_a_position_train_on_a_top_k_distribution(client, served):
    """``target_tokens`` ``[T, K]`` with ``weights`` ``[T, K]`` (top-K distillation, as
    tinker-cookbook's SDFT sends it): log-probs ``[T, K]`` of those tokens, the loss their
    weighted sum, beside a datum of one target a position in the same request."""
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=3).result()
    tokens = [5, 17, 42, 9, 3]
    wide = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]])
    weights = torch.tensor([[0.5, 0.3, 0.2]] * 5)
    data = [types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs={
                "target_tokens": types.TensorData.from_torch(wide),
                "weights": types.TensorData.from_torch(weights)}),
            types.Datum(model_input=types.ModelInput.from_ints(tokens),
                        loss_fn_inputs={"target_tokens": [17, 42, 9, 3, 28]})]
    result = tc.forward(data, "cross_entropy").result()
    ref = reference_logprobs(served[1], tokens + [0])  # row t scores after tokens[: t + 1]
    k_lp = result.loss_fn_outputs[0]["logprobs"].to_torch().double()
    one_lp = result.loss_fn_outputs[1]["logprobs"].to_torch().double()
    assert k_lp.shape == (5, 3) and one_lp.shape == (5,)
    torch.testing.assert_close(k_lp, ref.gather(-1, wide), atol=1e-4, rtol=0)
    torch.testing.assert_close(one_lp, ref.gather(-1, torch.tensor([[17], [42], [9], [3],
                                                                     [28]]))[:, 0],
                               atol=1e-4, rtol=0)
    expected = -(weights.double() * k_lp).sum() - one_lp.sum()
    assert result.metrics["loss:sum"] == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(Exception, match="differ in shape"):
        tc.forward([types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs={
            "target_tokens": types.TensorData.from_torch(wide),
            "weights": [1.0] * 5})], "cross_entropy").result()


def test_the_rest_client_lists_runs_and_checkpoints(client):
    """``RestClient``: a run with its ``user_metadata`` (where tinker-cookbook keeps the
    renderer name), its checkpoints and their weights info, read from the checkpoint
    directory; a deleted checkpoint is gone; an unknown run is named."""
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=5,
                                            user_metadata={"renderer_name": "role_colon"})
    state = tc.save_state("s1").result().path
    sampler_path = tc.save_weights_for_sampler("w1").result().path
    rest = client.create_rest_client()
    run = rest.get_training_run_by_tinker_path(state).result()
    assert (run.training_run_id, run.base_model, run.lora_rank) == (tc.model_id, "tiny", 4)
    assert run.user_metadata == {"renderer_name": "role_colon"}
    assert run.last_checkpoint.tinker_path == state
    assert run.last_sampler_checkpoint.tinker_path == sampler_path
    listed = rest.list_checkpoints(tc.model_id).result().checkpoints
    assert {(c.tinker_path, c.checkpoint_type) for c in listed} == {
        (state, "training"), (sampler_path, "sampler")}
    assert all(c.size_bytes > 0 for c in listed)
    info = rest.get_weights_info_by_tinker_path(sampler_path).result()
    assert (info.base_model, info.is_lora, info.lora_rank) == ("tiny", True, 4)
    runs = rest.list_training_runs(limit=100).result()
    assert tc.model_id in [r.training_run_id for r in runs.training_runs]
    assert runs.cursor.total_count >= 1
    rest.delete_checkpoint_from_tinker_path(state).result()
    assert [c.tinker_path for c in rest.list_checkpoints(tc.model_id).result().checkpoints] \
        == [sampler_path]
    with pytest.raises(Exception, match="no training run"):
        rest.get_training_run("nobody:train:0").result()


def test_a_finished_session_frees_its_training_clients(served):
    url, service, _ = served
    with tinker.ServiceClient(base_url=url, api_key="tml-test") as sc:
        tc = sc.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
        datum = sft_datum(tc.get_tokenizer())
        tc.forward_backward([datum], "cross_entropy").result()
        path = tc.save_weights_for_sampler("kept").result().path
        model_id = path.removeprefix("tinker://").split("/")[0]
        assert model_id in service.pool.slots
    deadline = time.monotonic() + 30
    while model_id in service.pool.slots:  # the finish runs after the session's requests
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # what it saved stays: a new session samples it
    sampler = tinker.ServiceClient(base_url=url, api_key="tml-test").create_sampling_client(
        model_path=path).result()
    assert sampler.sample(datum.model_input, num_samples=1, sampling_params=types.SamplingParams(
        max_tokens=2, seed=0)).result().sequences


def test_concurrent_samples_share_an_engine_call_and_draw_as_alone(client, served,
                                                                    monkeypatch):
    """Sample requests queued together run as one engine call a way of sampling (all but the
    seed), and each gets what it gets sampled alone."""
    _, service, app = served
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=5).result()
    tok = tc.get_tokenizer()
    sampler = tc.save_weights_and_get_sampling_client().result()
    alike = {"max_tokens": 10, "temperature": 1.0}
    asks = [("What is", 2, {**alike, "seed": 1}), ("What is 2+2?", 1, {**alike, "seed": 2}),
            ("Compute", 3, {**alike, "seed": 3}),
            ("What is", 2, {**alike, "seed": 4, "temperature": 0.7}),  # a way of its own
            ("Compute", 1, {"max_tokens": 6, "seed": 5})]  # and another
    rows = []
    generate = service.engine.generate
    monkeypatch.setattr(service.engine, "generate", lambda prompts, sampling, seeds=None: (
        rows.append(len(prompts)), generate(prompts, sampling, seeds))[1])

    def sample(text, n, params):
        return sampler.sample(types.ModelInput.from_ints(tok.encode(text)), num_samples=n,
                              sampling_params=types.SamplingParams(**params))
    gate, queue = threading.Event(), app.state.requests
    before = len(queue.results)
    queue.submit(gate.wait)  # the worker is busy while the requests come in
    futures = [sample(*ask) for ask in asks]
    deadline = time.monotonic() + 30
    while len(queue.results) < before + 1 + len(asks):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    gate.set()
    together = [f.result() for f in futures]
    assert rows == [6, 2, 1]  # the three ways of sampling, a call each
    rows.clear()
    for ask, shared in zip(asks, together):
        alone = sample(*ask).result()
        assert [s.tokens for s in shared.sequences] == [s.tokens for s in alone.sequences]
        for a, b in zip(shared.sequences, alone.sequences):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
            assert a.stop_reason == b.stop_reason
    assert rows == [n for _, n, _ in asks]


def test_a_prompt_and_max_tokens_beyond_the_context_are_refused(client, served):
    """The model reads the prompt and every sampled token but the last: at most its 512
    positions (max_position_embeddings)."""
    sampler = client.create_sampling_client(base_model="tiny").result()
    prompt = types.ModelInput.from_ints([5] * 500)
    for params in (types.SamplingParams(max_tokens=14, seed=0),  # 513 tokens read
                   types.SamplingParams(max_tokens=2000, seed=0)):
        with pytest.raises(tinker.BadRequestError, match="exceed the model's context"):
            sampler.sample(prompt, num_samples=1, sampling_params=params).result()
    with pytest.raises(tinker.BadRequestError, match="exceed the model's context"):
        sampler.compute_logprobs(types.ModelInput.from_ints([5] * 513)).result()
    # what fits is sampled: 512 tokens read; without max_tokens, up to the context
    out = sampler.sample(prompt, num_samples=1, sampling_params=types.SamplingParams(
        max_tokens=13, seed=0, stop=[])).result()
    assert len(out.sequences[0].tokens) == 13
    out = sampler.sample(types.ModelInput.from_ints([5] * 509), num_samples=1,
                         sampling_params=types.SamplingParams(seed=0, stop=[])).result()
    assert len(out.sequences[0].tokens) == 4
    assert len(sampler.compute_logprobs(types.ModelInput.from_ints([5] * 512)).result()) == 512


def test_an_empty_stop_list_samples_past_the_end_of_sequence_token(client, served):
    """The SDK's ``SamplingParams``: ``stop=None`` keeps EOS stopping, ``[]`` disables it."""
    sampler = client.create_sampling_client(base_model="tiny").result()
    tok = served[1].tokenizer
    prompt = types.ModelInput.from_ints(tok.encode("What is"))

    def sample(**stop):  # long: this random model's EOS is about one token in 600
        return sampler.sample(prompt, num_samples=16, sampling_params=types.SamplingParams(
            max_tokens=200, seed=1, **stop)).result().sequences
    stopped = [s for s in sample() if s.stop_reason == "stop"]
    assert stopped and all(s.tokens[-1] == tok.eos_token_id for s in stopped)
    free = sample(stop=[])
    assert all(s.stop_reason == "length" and len(s.tokens) == 200 for s in free)
    # the same draws, past the EOS: the stopped sequences are their beginnings
    assert all(any(f.tokens[:len(s.tokens)] == s.tokens for f in free) for s in stopped)

"""P-GenRM's user prototypes in a run (ALGORITHMS.md §14 ``pgenrm``): text embeddings pooled
from a frozen backbone, ``posttrain reward-model`` with ``rm.loss: pgenrm_pair`` on pairs that
name their users, the saved module, and the judge ``prototypes`` scoring an RL run."""

import json
import random

import pytest
import torch
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.data.preference_pairs import PreferencePair, load_preference_data, pair_batch
from posttrain.models import load_model, load_tokenizer, pooled_states
from posttrain.models.preference_prototypes import PreferencePrototypes, UserPreferences
from posttrain.features.pgenrm.training import embed_pairs, user_histories
from posttrain.features.pgenrm.judge import PrototypeJudge
from posttrain.types import Episode, Segment

EPS32 = torch.finfo(torch.float32).eps


def test_pooled_states_are_the_masked_means_of_the_final_hidden_states(model, tokenizer):
    pairs = [PreferencePair(({"role": "user", "content": "What is 1+2?"},), "<answer>3</answer>",
                            "<think>1+2=3</think><answer>3</answer>"),
             PreferencePair(({"role": "user", "content": "What is 40+51?"},), "91", "19")]
    batch = pair_batch(tokenizer, pairs)
    prompt, reply = pooled_states(model, batch.input_ids, batch.attention_mask, batch.loss_mask)
    assert prompt.shape == reply.shape == (4, model.config.hidden_size)
    for i in range(4):  # each row alone, unpadded, averaged in float64
        n = int(batch.attention_mask[i].sum())
        with torch.no_grad():
            states = model(input_ids=batch.input_ids[i : i + 1, :n], output_hidden_states=True
                           ).hidden_states[-1][0].double()
        mask = batch.loss_mask[i, :n].bool()
        before = mask.cumsum(0) == 0  # the prompt: before the first reply token
        assert 0 < int(mask.sum()) and int(before.sum()) + int(mask.sum()) < n  # an end token
        # padded and alone: two float32 forwards of the same row; the final norm keeps each
        # state near unit scale, so 64 eps32 of the largest state bounds the mean's error
        bound = 64 * EPS32 * float(states.abs().max())
        assert torch.allclose(reply[i].double(), states[mask].mean(dim=0), atol=bound)
        assert torch.allclose(prompt[i].double(), states[before].mean(dim=0), atol=bound)
    # the two replies of a pair share the prompt, so its embedding too
    assert torch.allclose(prompt[0], prompt[1], atol=64 * EPS32 * float(prompt.abs().max()))


def test_a_row_without_a_reply_token_cannot_be_pooled(model):
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="no reply token"):
        pooled_states(model, ids, torch.ones_like(ids), torch.zeros_like(ids))


def test_a_short_history_repeats_in_order():
    emb = tuple(torch.arange(5.0)[:, None] * s for s in (1.0, 10.0, 100.0))  # q, y+, y-
    users = torch.tensor([0, 1, 0, 0, 1])
    q, diff = user_histories(["a", "b"], users, emb, 4)
    assert q[:, :, 0].tolist() == [[0, 2, 3, 0], [1, 4, 1, 4]]
    assert diff[:, :, 0].tolist() == [[-90 * x for x in (0, 2, 3, 0)],
                                      [-90 * x for x in (1, 4, 1, 4)]]


def saved_preferences(tmp_path) -> UserPreferences:
    torch.manual_seed(0)
    module = PreferencePrototypes(n_users=3, dim=4, n_prototypes=2, lam_q=0.5, rho=2.0)
    history = (torch.randn(3, 2, 4), torch.randn(3, 2, 4))
    module.initialise(history[1])
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    prefs = UserPreferences(module, ["ann", "bo", "cy"], *history)
    prefs.save(tmp_path)
    return prefs


def test_saved_prototypes_load_and_score_the_same(tmp_path):
    prefs = saved_preferences(tmp_path)
    loaded = UserPreferences.load(tmp_path)
    assert loaded.users == ["ann", "bo", "cy"] and loaded.module.rho == 2.0
    query, chosen, rejected = torch.randn(3, 5, 4).unbind(0)
    names = ["cy", "ann", "cy", "bo", "ann"]
    with torch.no_grad():
        got = loaded.scores(names, query, chosen)
        assert torch.equal(got, prefs.scores(names, query, chosen))
        # the score's difference is the module's Delta (one reduction order apart)
        delta = prefs.module.delta(prefs.index(names), query, chosen, rejected,
                                   prefs.history_q[prefs.index(names)],
                                   prefs.history_diff[prefs.index(names)])
        diff = got - loaded.scores(names, query, rejected)
    assert torch.allclose(diff, delta, atol=32 * EPS32 * float(got.abs().max() + 1))
    assert not list(tmp_path.glob("*.tmp"))


def test_an_unknown_user_or_a_missing_file_is_a_clear_error(tmp_path):
    prefs = saved_preferences(tmp_path)
    with pytest.raises(KeyError, match="no user 'dee'"):
        prefs.index(["ann", "dee"])
    with pytest.raises(FileNotFoundError, match="rm.loss=pgenrm_pair"):
        UserPreferences.load(tmp_path / "elsewhere")


def test_pairs_name_their_user_and_a_bad_user_is_skipped(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b", "user": "ann"},
            {"prompt": "q", "chosen": "a", "rejected": "b", "user": 7},
            {"prompt": "q", "chosen": "a", "rejected": "b"},
            {"prompt": "q", "chosen": "a", "rejected": "b", "user": ["ann"]},
            {"prompt": "q", "chosen": "a", "rejected": "b", "user": True}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_preference_data(path)
    assert [p.user for p in data.pairs] == ["ann", "7", None]
    assert [(i, "'user' must be" in why) for i, why in data.skipped] == [(3, True), (4, True)]


@pytest.mark.parametrize("overrides,message", [
    (["rm.loss=pgenrm_pair"], "set rm.data"),
    (["rm.prototypes.count=3"], "rm.prototypes is set but cannot take effect"),
    (["reward.parts.p={verifier: judge}", "reward.judges.p={kind: prototypes, model: m}"],
     "set one of user"),
    (["reward.parts.p={verifier: judge}",
      "reward.judges.p={kind: prototypes, model: m, user: a, user_column: u}"],
     "set one of user"),
])
def test_settings_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", overrides)


def user_pairs(path, users=8, per_user=12, seed=0):
    """Brief users prefer the bare answer, teachers the working: ``per_user`` pairs each of
    two-digit sums, rows shuffled."""
    rng = random.Random(seed)
    names = [f"{'brief' if j % 2 else 'teacher'}_{j}" for j in range(users)]
    rows = []
    for name in names:
        for _ in range(per_user):
            a, b = rng.randint(10, 49), rng.randint(10, 49)
            bare, worked = f"<answer>{a + b}</answer>", f"<think>{a}+{b}</think><answer>{a + b}" \
                                                        "</answer>"
            chosen, rejected = (bare, worked) if name.startswith("brief") else (worked, bare)
            rows.append({"prompt": f"What is {a}+{b}?", "user": name, "chosen": chosen,
                         "rejected": rejected})
    rng.shuffle(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return names


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Prototypes trained by the CLI on a nano backbone: the run directory and the output."""
    tmp = tmp_path_factory.mktemp("prototypes")
    user_pairs(tmp / "pairs.jsonl")
    result = CliRunner().invoke(app, [
        "reward-model", "configs/quickstart.yaml", f"out_dir={tmp / 'run'}", "model.preset=nano",
        "rm.loss=pgenrm_pair", f"rm.data={tmp / 'pairs.jsonl'}", "rm.steps=40",
        "rm.batch_size=16", "rm.eval_pairs=20", "rm.eval_every=20", "rm.optim.lr=0.01",
        "rm.prototypes.count=2", "rm.prototypes.history=4"])
    assert result.exit_code == 0, result.output
    return tmp / "run", result.output


def test_the_cli_trains_prototypes_that_tell_the_users_apart(trained):
    run, output = trained
    out = run / "rm_model"
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    evals = [r for r in rows if "eval/reward_accuracy" in r]
    assert [r["step"] for r in evals] == [20, 40]
    # 9 held-out pairs (a tenth of 96), every user seen in training: each is one of two
    # opposite preferences, which one user's own pairs show
    assert evals[-1]["eval/reward_accuracy"] == 1.0 and evals[-1]["eval/unknown_users"] == 0
    assert "reward_accuracy 1.000" in output.replace("\n", " ")
    prefs = UserPreferences.load(out)
    nearest = prefs.module.nearest().tolist()
    brief = {nearest[j] for j, u in enumerate(prefs.users) if u.startswith("brief")}
    teacher = {nearest[j] for j, u in enumerate(prefs.users) if u.startswith("teacher")}
    assert len(brief) == len(teacher) == 1 and brief != teacher  # a prototype a persona
    assert load_model(out).config.hidden_size == prefs.module.users.shape[1]


def test_more_prototypes_than_users_is_a_clear_error(tmp_path):
    user_pairs(tmp_path / "pairs.jsonl", users=2)
    result = CliRunner().invoke(app, [
        "reward-model", "configs/quickstart.yaml", f"out_dir={tmp_path / 'run'}",
        "model.preset=nano", "rm.loss=pgenrm_pair", f"rm.data={tmp_path / 'pairs.jsonl'}",
        "rm.prototypes.count=3"])
    assert result.exit_code != 0 and "count=3 prototypes for 2 users" in result.output


def test_the_prototypes_judge_scores_an_rl_run(trained, tmp_path):
    out = trained[0] / "rm_model"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={tmp_path / 'rl'}", "model.preset=nano",
        "stages=[rl]", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2",
        "eval.num_problems=2", "rl.save_episodes=true",
        "reward.parts.taste={verifier: judge, weight: 0.1}",
        f"reward.judges.taste={{kind: prototypes, model: {out}, user: brief_1}}"])
    assert result.exit_code == 0, result.output
    from posttrain.types import read_episodes

    prefs, model = UserPreferences.load(out), load_model(out).eval()
    eps = list(read_episodes(tmp_path / "rl" / "episodes.jsonl"))
    for e in eps:  # each episode alone: z . y of its reply under brief_1
        seg = e.segments[-1]
        ids = torch.tensor([seg.token_ids])
        q, y = pooled_states(model, ids, torch.ones_like(ids), torch.tensor([seg.loss_mask]))
        with torch.no_grad():
            want = float(prefs.scores(["brief_1"], q, y)[0])
        # batched (padded) in the run and alone here: z . y sums d products of float32
        # terms; 64 eps32 of their magnitude
            scale = float((prefs.preference(["brief_1"], q).abs() * y.abs()).sum())
        assert e.rewards["taste"] == pytest.approx(want, abs=64 * EPS32 * scale)
    bad = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={tmp_path / 'bad'}", "model.preset=nano",
        "stages=[rl]", "reward.parts.taste={verifier: judge}",
        f"reward.judges.taste={{kind: prototypes, model: {out}, user: nobody}}"])
    assert bad.exit_code != 0 and "'nobody' is not one of the 8 users" in bad.output


def test_an_episode_without_reply_tokens_is_unscored(trained, tokenizer):
    out = trained[0] / "rm_model"
    judge = PrototypeJudge(load_model(out).eval(), UserPreferences.load(out),
                           tokenizer.pad_token_id, user="teacher_0")
    prompt = tokenizer.encode("What is 1+2?")
    answered = Episode([Segment.from_prompt_completion(prompt, tokenizer.encode("3"))])
    silent = Episode([Segment.from_prompt_completion(prompt, [])])
    scores = judge([silent, answered, silent], [None] * 3)
    assert scores[0] is None and scores[2] is None and isinstance(scores[1], float)


def test_the_pairs_embed_by_pair(tiny_dir):
    tok, model = load_tokenizer(tiny_dir), load_model(tiny_dir).eval()
    pairs = [PreferencePair(({"role": "user", "content": f"What is {k}+1?"},), f"{k + 1}",
                            f"{k}") for k in range(70)]  # more than one chunk of 64
    query, chosen, rejected = embed_pairs(model, tok, pairs)
    assert query.shape == chosen.shape == rejected.shape == (70, model.config.hidden_size)
    batch = pair_batch(tok, pairs[65:66])
    q, y = pooled_states(model, batch.input_ids, batch.attention_mask, batch.loss_mask)
    bound = 64 * EPS32 * float(y.abs().max())
    assert torch.allclose(chosen[65], y[0], atol=bound) and torch.allclose(rejected[65], y[1],
                                                                           atol=bound)

"""Judges as reward parts: a prompted grader's scores and their failures, round-robin group
comparison with the verbosity budget, a Bradley-Terry reward model, the OpenAI-compatible
client against a local HTTP endpoint, and a judged RL run through the CLI."""

import json
import re

import pytest
import torch
from openai_endpoint import serve
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.engines import TorchEngine
from posttrain.engines.chat import engine_chat, openai_chat
from posttrain.envs import ArithmeticTasks
from posttrain.models import load_tokenizer, load_value_model
from posttrain.rewards import RewardFunction
from posttrain.rollout import rollout_metrics
from posttrain.rollout.scoring import missing_metrics
from posttrain.rollout.single_turn import rollout
from posttrain.rollout.wrappers.judged import (
    ComparisonJudge,
    JudgedRollout,
    RewardModelJudge,
    ScoreJudge,
    chat_compare,
)
from posttrain.types import Episode, SamplingParams, Segment, read_episodes

TASKS = ArithmeticTasks(("+",), 2).eval_set(4)
REWARD = RewardFunction({"correct": ("numeric", 1.0), "quality": ("judge", 0.5)})


def episode(completion, group, n_tokens=3):
    return Episode([Segment.from_prompt_completion([1, 2], [5] * n_tokens)], rewards={},
                   reward=0.0, group_id=group, meta={"completion": completion})


def grader(conversations):
    """A judge that reads the response: 'good' -> 8, 'bad' -> 2, anything else -> garbage."""
    out = []
    for c in conversations:
        response = c[-1]["content"].split("Response:\n")[-1]
        out.append({"good": "fine <score>8</score>", "bad": "<score>2</score>"}.get(
            response, "I cannot grade this <score>"))
    return out


def comparer(conversations):
    """Prefers 'good'; answers garbage when either answer is 'weird'."""
    out = []
    for c in conversations:
        a, b = re.findall(r"Answer [AB]:\n(\S+)", c[-1]["content"])
        if "weird" in (a, b):
            out.append("no idea")
        else:
            out.append("<winner>tie</winner>" if a == b else
                       f"<winner>{'A' if a == 'good' else 'B'}</winner>")
    return out


def test_score_judge_scores_parse_and_misses_are_imputed_and_counted():
    from posttrain.rollout.wrappers.judged import apply_judge

    eps = [episode("good", "g0"), episode("bad", "g0"), episode("???", "g0"),
           episode("???", "g1"), episode("good", "g1")]
    scores = ScoreJudge(grader, n_samples=2)(eps, [TASKS[0]] * 5)
    assert scores == [0.8, 0.2, None, None, 0.8]
    for e in eps:
        e.rewards["correct"] = 1.0
    apply_judge(eps, "quality", scores, REWARD)
    assert [e.rewards["quality"] for e in eps] == pytest.approx([0.8, 0.2, 0.5, 0.8, 0.8])
    assert eps[2].meta["missing_parts"] == ["quality"] and "missing_parts" not in eps[0].meta
    assert eps[1].reward == pytest.approx(1.0 + 0.5 * 0.2)
    assert missing_metrics(eps) == {"reward/quality/missing": pytest.approx(0.4)}


def test_group_comparison_with_budget_and_unparsable_pairs():
    eps = [episode("good", "g", 3), episode("bad", "g", 3), episode("good", "g", 50)]
    scores = ComparisonJudge(chat_compare(comparer), budget_tokens=10)(eps, [TASKS[0]] * 3)
    assert scores == pytest.approx([1.0, 0.5, 0.0])  # the spec's example: y3 is verbose
    eps = [episode("good", "g"), episode("weird", "g"), episode("bad", "g")]
    scores = ComparisonJudge(chat_compare(comparer))(eps, [TASKS[0]] * 3)
    # good beats bad, pairs with 'weird' unparsable (ties); weird had no parsed pair
    assert scores[0] == pytest.approx(0.75) and scores[2] == pytest.approx(0.25)
    assert scores[1] is None


def test_a_tiny_models_garbage_grades_are_missing_not_zero(tiny_dir, model, tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    judged = JudgedRollout(rollout, {"quality": ScoreJudge(engine_chat(engine, tokenizer, 16))})
    eps = judged(engine, tokenizer, TASKS, REWARD, SamplingParams(max_new_tokens=6, seed=1), 2)
    assert all(e.meta["missing_parts"] == ["quality"] for e in eps)
    assert rollout_metrics(eps, "correct")["reward/quality/missing"] == 1.0


def test_reward_model_judge_is_the_scalar_head_on_the_last_token(tiny_dir, model, tokenizer):
    rm = load_value_model(tiny_dir)
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    eps = rollout(engine, tokenizer, TASKS, REWARD, SamplingParams(max_new_tokens=6, seed=2), 2)
    got = RewardModelJudge(rm, tokenizer.pad_token_id, micro_batch_size=3)(eps, [])
    for e, value in zip(eps, got):
        with torch.no_grad():
            want = rm(input_ids=torch.tensor([e.segments[0].token_ids])).logits[0, -1, 0]
        # batched (padded) and alone: two float32 forwards, within 16 eps32 of the size of the
        # head's terms (the score sums ~64 products of O(1) hidden states and 0.02-sized weights)
        eps32 = torch.finfo(torch.float32).eps
        assert value == pytest.approx(float(want), abs=16 * eps32 * max(1.0, abs(float(want))))


def grade_or_fail(body):
    """Echo a grade (the number of messages), or fail with 500."""
    if "fail" in body["messages"][-1]["content"]:
        return None
    return {"role": "assistant", "content": f"<score>{len(body['messages'])}</score>"}


def test_openai_client_against_a_local_endpoint_and_its_failures():
    with serve(grade_or_fail) as url:
        chat = openai_chat(url, "judge", timeout_s=5)
        eps = [episode("good", "g"), episode("please fail", "g")]
        assert chat([[{"role": "user", "content": "hi"}]]) == ["<score>1</score>"]
        assert ScoreJudge(chat)(eps, [TASKS[0]] * 2) == [0.2, None]


def judged_rl_run(out, part: str, judge: str, *settings: str) -> list[dict]:
    """A short nano RL run through the CLI with reward part ``part`` scored by ``judge``;
    its metric rows."""
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "model.preset=nano",
        "stages=[rl]", "rl.prompts_per_step=2", "eval.num_problems=2",
        f"reward.judges.{part}={judge}", *settings])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def reward_model_cli(tmp_path, out, *settings: str) -> str:
    """``posttrain reward-model`` on nano with a few generated pairs into the run directory
    ``out.parent`` (the model is ``out``: its ``rm_model``); its output. Its records are in
    that directory, and none in the config's ``out_dir`` (they went there)."""
    trained = CliRunner().invoke(app, [
        "reward-model", "configs/quickstart.yaml", f"out_dir={tmp_path / 'base'}",
        "model.preset=nano", "rm.batch_size=4", "--out", str(out.parent), *settings])
    assert trained.exit_code == 0, trained.output
    assert out.name == "rm_model" and (out / "config.json").is_file()
    assert (out.parent / "curves_reward_model.png").stat().st_size > 10_000
    assert (out.parent / "metrics.jsonl").is_file() and (out.parent / "config.yaml").is_file()
    assert not (tmp_path / "base").exists()
    return trained.output


def test_a_judged_rl_run_through_the_cli(tiny_dir, tmp_path):
    rows = judged_rl_run(tmp_path / "run", "quality",
                         f"{{kind: score, model: {tiny_dir}, max_new_tokens: 8}}",
                         "rl.steps=2", "rl.group_size=2",
                         "reward.parts.quality={verifier: judge, weight: 0.5}")
    assert rows[-1]["reward/quality/missing"] == 1.0  # the untrained judge never grades


@pytest.mark.parametrize("overrides,message", [
    (["reward.parts.q={verifier: judge}"], "must name the same parts"),
    (["reward.parts.q={verifier: judge}", "reward.judges.q={model: m, endpoint: e}"],
     "exactly one of model and endpoint"),
    (["reward.parts.q={verifier: judge}",
      "reward.judges.q={kind: reward_model, endpoint: e}"],
     r"q.endpoint: applies to kind in \(comparison, pgenrm, score\), not reward_model"),
    (["reward.parts.q={verifier: judge}", "reward.judges.q={model: m}", "rl.mode=async"],
     "rl.mode=sync"),
])
def test_bad_judge_settings_are_refused(overrides, message):
    from posttrain.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", overrides)


@pytest.mark.plots
def test_a_reward_model_trained_by_the_cli_scores_an_rl_run(tmp_path):
    out = tmp_path / "rm" / "rm_model"
    output = reward_model_cli(tmp_path, out, "rm.steps=4", "rm.num_pairs=16",
                              "rm.eval_pairs=8", "rm.eval_every=4")
    assert "reward_accuracy" in output and (out / "config.json").is_file()
    rows = judged_rl_run(tmp_path / "run", "rm", f"{{kind: reward_model, model: {out}}}",
                         "rl.steps=1", "rl.group_size=2",
                         "reward.parts.rm={verifier: judge, weight: 1.0}",
                         "rl.save_episodes=true")
    eps = list(read_episodes(tmp_path / "run" / "episodes.jsonl"))
    rm = load_value_model(out).eval()
    eps32 = torch.finfo(torch.float32).eps
    for e in eps:  # the trained model's scalar head on each episode's last token, alone
        with torch.no_grad():
            want = float(rm(input_ids=torch.tensor([e.segments[0].token_ids])).logits[0, -1, 0])
        # batched (padded) in the run and alone here: two float32 forwards, 16 eps32 of the
        # size of the head's terms (docs/testing.md; as in the test of RewardModelJudge above)
        assert e.rewards["rm"] == pytest.approx(want, abs=16 * eps32 * max(1.0, abs(want)))
    assert rows[0]["reward/rm/missing"] == 0.0
    # the logged part is the episodes' mean: the same float64 sum in the same order (exact)
    assert rows[0]["reward/rm"] == sum(e.rewards["rm"] for e in eps) / len(eps)


@pytest.mark.plots
def test_a_pairwise_classifier_trained_by_the_cli_judges_an_rl_run(tmp_path):
    out = tmp_path / "pairwise" / "rm_model"
    reward_model_cli(tmp_path, out, "rm.loss=pairwise_classifier", "rm.steps=2",
                     "rm.num_pairs=8", "rm.eval_pairs=4", "rm.eval_every=0")
    rows = judged_rl_run(tmp_path / "run", "pref", f"{{kind: pairwise_model, model: {out}}}",
                         "rl.steps=1", "rl.group_size=3",
                         "reward.parts.pref={verifier: judge, weight: 1.0}",
                         "rl.save_episodes=true")
    eps = list(read_episodes(tmp_path / "run" / "episodes.jsonl"))
    got, want, bound = round_robin_of(load_value_model(out).eval(), load_tokenizer(out), eps)
    assert got == pytest.approx(want, abs=bound)
    assert rows[0]["reward/pref/missing"] == 0.0
    # a round robin hands out G (G - 1) / 2 points to G answers: the group's mean is 1/2 for
    # any classifier (float64 sums of a few terms: a few eps64)
    assert rows[0]["reward/pref"] == pytest.approx(0.5, abs=8 * torch.finfo(torch.float64).eps)


def round_robin_of(model, tokenizer, eps):
    """Each episode's judged ``pref`` and the pairwise classifier's rule recomputed on the
    episodes (``ClassifierCompare`` + ``group_binary_comparison``, no budget): ``r_i`` = the
    mean over the rest of its group of ``P(i beats j) = (sigmoid s(x, i, j) + 1 - sigmoid
    s(x, j, i)) / 2``, each comparison prompt scored alone; and the bound on their difference."""
    from posttrain.config.sections.reward import DEFAULT_RUBRIC
    from posttrain.models import encode_prompt
    from posttrain.rewards.judge import comparison_messages

    def score(question, a, b):
        ids = encode_prompt(tokenizer, comparison_messages(question, a, b, DEFAULT_RUBRIC))
        with torch.no_grad():
            return float(model(input_ids=torch.tensor([ids])).logits[0, -1, 0])

    by_group: dict[str, list[int]] = {}
    for k, e in enumerate(eps):
        by_group.setdefault(e.group_id, []).append(k)
    want, largest = [0.0] * len(eps), 0.0
    for rows in by_group.values():
        seg = eps[rows[0]].segments[0]
        prompt = tokenizer.decode(seg.token_ids[:seg.first_sampled])
        question = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt, re.DOTALL)[-1]
        answers = [eps[r].meta["completion"] for r in rows]
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                s_ab, s_ba = score(question, answers[i], answers[j]), \
                    score(question, answers[j], answers[i])
                largest = max(largest, abs(s_ab), abs(s_ba))
                p = (torch.sigmoid(torch.tensor(s_ab)) + 1 - torch.sigmoid(torch.tensor(s_ba))) / 2
                want[rows[i]] += float(p) / (len(rows) - 1)
                want[rows[j]] += (1 - float(p)) / (len(rows) - 1)
    eps32 = torch.finfo(torch.float32).eps
    # two float32 forwards (the run's padded micro-batch, each prompt alone here): 16 eps32 of
    # max|s| (docs/testing.md), times sigmoid's slope <= 1/4, halved and averaged; plus the
    # float32 sigmoid's and (p_ab + 1 - p_ba) / 2's roundings, about 2 eps32
    return [e.rewards["pref"] for e in eps], want, 4 * eps32 * largest + 2 * eps32

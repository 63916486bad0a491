"""P-GenRM as a judge (ALGORITHMS.md §14 ``pgenrm``): chains for the task's user and for
similar users, aggregated as the mean of the two means of what parses; a missing grading is
None, never 0; the judge scores a reward part in an RL run."""

import json
from dataclasses import dataclass, field

import pytest
import torch
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.models.preference_prototypes import PreferencePrototypes
from posttrain.features.pgenrm.judge import PGenRMJudge, pgenrm_score
from posttrain.types import Episode, Segment


@dataclass
class UserTask:
    question: str
    row: dict = field(default_factory=dict)
    reference: str = ""

    def messages(self):
        return [{"role": "user", "content": self.question}]


def answered(text):
    return Episode([Segment.from_prompt_completion([1], [2])], {}, 0.0, "0",
                   meta={"completion": text})


def test_the_score_averages_the_users_and_the_similar_users_means():
    assert pgenrm_score([0.8, None, 0.6], [0.2]) == pytest.approx((0.7 + 0.2) / 2)
    assert pgenrm_score([0.8, 0.6], [None, None]) == pytest.approx(0.7)  # one side parsed
    assert pgenrm_score([None], [0.3, 0.5]) == pytest.approx(0.4)
    assert pgenrm_score([None, None], [None]) is None  # missing, never 0


def test_chains_are_asked_for_the_user_and_each_similar_user():
    asked = []

    def chat(conversations):
        asked.extend(conversations)
        return ["Final score: 8" if "likes short" in c[1]["content"]
                else "Criterion: x | weight 1 | score 4" if "likes long" in c[1]["content"]
                else "no chain at all" for c in conversations]

    judge = PGenRMJudge(chat, n_samples=2, user_column="user", similar_column="like")
    tasks = [UserTask("Q1?", {"user": "likes short answers", "like": ["likes long answers"]}),
             UserTask("Q2?", {"user": "likes long answers", "like": []}),
             UserTask("Q3?", {"user": "nobody", "like": ["nobody either"]})]
    scores = judge([answered("A1"), answered("A2"), answered("A3")], tasks)
    assert scores == [pytest.approx((0.8 + 0.4) / 2), pytest.approx(0.4), None]
    assert len(asked) == 3 + 2 + 3  # 2 analyses a user, one a similar user
    assert "Q1?" in asked[0][1]["content"] and "A1" in asked[0][1]["content"]
    assert "likes long answers" in asked[2][1]["content"]


@pytest.mark.parametrize("similar,asked", [("likes long answers", 2), (None, 1), ([], 1)])
def test_the_similar_users_column_may_hold_one_profile_or_none(similar, asked):
    chats = []
    judge = PGenRMJudge(lambda c: chats.extend(c) or ["Final score: 5"] * len(c),
                        user_column="user", similar_column="like")
    assert judge([answered("A")], [UserTask("Q?", {"user": "u", "like": similar})]) == [0.5]
    assert len(chats) == asked


def test_a_task_without_its_users_column_is_a_clear_error():
    judge = PGenRMJudge(lambda c: [], user_column="user")
    with pytest.raises(KeyError, match="no column 'user'"):
        judge([answered("A")], [UserTask("Q?", {"persona": "x"})])


def test_similar_users_share_the_nearest_prototype_nearest_first():
    module = PreferencePrototypes(n_users=5, dim=2, n_prototypes=2)
    with torch.no_grad():
        module.users.copy_(torch.tensor([[0.0, 0], [0.4, 0], [5, 5], [0.1, 0], [4, 4]]))
        module.prototypes.copy_(torch.tensor([[0.0, 0], [5, 5]]))
    assert module.similar_users(0, 5) == [3, 1]
    assert module.similar_users(0, 1) == [3]
    assert module.similar_users(2, 5) == [4]


@pytest.mark.parametrize("judge,message", [
    ("{kind: pgenrm, model: m}", "set one of user"),
    ("{kind: pgenrm, model: m, user: a, user_column: u}", "set one of user"),
    ("{kind: pgenrm, user: a}", "exactly one of model and endpoint"),
    ("{kind: pgenrm, model: m, user: a, n_samples: 3}", "needs temperature > 0"),
])
def test_a_pgenrm_judge_that_cannot_work_is_refused(judge, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", ["reward.parts.taste={verifier: judge}",
                                                f"reward.judges.taste={judge}"])


def test_the_judge_scores_a_reward_part_in_an_rl_run(tmp_path, tiny_dir):
    """An untrained judge writes no chain that parses: every sample's part is missing (and
    counted), none is scored 0, and the run trains on the verifiable parts."""
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "stages=[rl]", "rl.steps=1",
        "rl.prompts_per_step=2", "rl.group_size=2", "eval.num_problems=2",
        "reward.parts.taste={verifier: judge, weight: 0.5}",
        f"reward.judges.taste={{kind: pgenrm, model: {tiny_dir}, user: a busy teacher, "
        "max_new_tokens: 8}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    step = next(r for r in rows if r.get("stage") == "rl" and "reward/taste/missing" in r)
    assert step["reward/taste/missing"] == 1.0 and step["reward/taste"] == 0.0


@pytest.mark.parametrize("persona,correct,worked,final", [
    ("brief", True, False, 10.0), ("brief", True, True, 7.9), ("brief", False, False, 3.0),
    ("teacher", True, True, 10.0), ("teacher", False, False, 0.9)])
def test_the_examples_gold_chains_read_back_as_their_weighted_sums(persona, correct, worked,
                                                                   final):
    from posttrain.config.extension import load_object
    from posttrain.rewards.evaluation_chain import extract

    gold = load_object("examples/pgenrm/personas.py:gold_chain")(persona, correct, worked)
    assert extract(gold) == pytest.approx(final / 10)
    criteria_only = gold.rsplit("\nFinal score", 1)[0]  # the fallback reads the same score
    assert extract(criteria_only) == pytest.approx(final / 10)


def test_the_examples_styles_keep_or_drop_the_working():
    from posttrain.config.extension import load_object

    styled = load_object("examples/pgenrm/personas.py:styled")
    answer = "<think>0+1=1 2+9=11</think><answer>111</answer>"
    assert styled(answer, True) == answer and styled(answer, False) == "<answer>111</answer>"


def pairs_example(name):
    from posttrain.config.extension import load_object

    return load_object(f"examples/pgenrm/pairs.py:{name}")


def test_the_grpo_stages_parts_order_the_pairs_and_cover_the_preference():
    ordered, coverage = pairs_example("ordered"), pairs_example("coverage")
    assert ordered(0.9, [0.5, 0.95, None], chosen=True) == pytest.approx(1 / 3)
    assert ordered(0.5, [0.9, 0.4], chosen=False) == pytest.approx(1 / 2)
    assert ordered(None, [0.1], chosen=True) == 0.0  # no parse orders nothing
    chain = "Persona: x\nCore preference: the answer ALONE, please\nFinal score: 3"
    assert coverage(chain, "the answer alone") == 1.0
    assert coverage("Core preference: the working", "the answer alone") == pytest.approx(1 / 3)
    assert coverage("Final score: 3", "the answer alone") == 0.0


def test_a_pair_rollout_judges_both_answers_in_one_group(tokenizer):
    from agent_helpers import ScriptedEngine

    from posttrain.rewards import RewardFunction
    from posttrain.types import SamplingParams

    row = {"rejected_prompt": [{"role": "user", "content": "REJECTED?"}],
           "preference": "the answer alone"}
    tasks = [UserTask("CHOSEN?", row)]
    engine = ScriptedEngine(tokenizer, lambda p: "Core preference: the answer alone\n"
                            "Final score: 8" if "CHOSEN?" in p else "Final score: 9")
    reward_fn = RewardFunction({"or": ("judge", 1.0), "pr": ("judge", 0.5)})
    episodes = pairs_example("pair_rollout")(engine, tokenizer, tasks, reward_fn,
                                             SamplingParams(seed=0), 4, group_prefix="0-")
    assert [e.meta["side"] for e in episodes] == ["chosen"] * 2 + ["rejected"] * 2
    assert {e.group_id for e in episodes} == {"0-0"}
    assert pairs_example("order")(episodes, tasks * 4) == [0.0] * 4  # 8 < 9: misordered
    assert pairs_example("cover")(episodes, tasks * 4) == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="group_size must be even"):
        pairs_example("pair_rollout")(engine, tokenizer, tasks, reward_fn,
                                      SamplingParams(seed=0), 3)

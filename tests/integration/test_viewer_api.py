"""``posttrain view``'s API over a recorded run: metrics read as they are appended (a line
still being written waits), episodes filtered, sorted and paged from an index, one episode
token by token with its recorded log-probs, a group's group-normalised rewards, and errors
that name what is wrong."""

import json
import statistics

import pytest
import torch
from fastapi.testclient import TestClient
from viewer_helpers import ODD_LENGTH, recorded_run

from posttrain.types import read_episodes
from posttrain.viewer import create_viewer_app

EPS32 = torch.finfo(torch.float32).eps  # 2**-23
EPS64 = torch.finfo(torch.float64).eps


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # rewards that differ within a group: the advantages checked below are not all 0
    return recorded_run(tmp_path_factory.mktemp("viewer") / "run", ODD_LENGTH)


@pytest.fixture
def client(run):
    return TestClient(create_viewer_app([run]))


def test_metrics_follow_a_run_that_is_still_writing(run, tmp_path, client):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    got = client.get("/api/runs/0/metrics").json()
    assert got == {"rows": rows, "next": len(rows)}
    live = tmp_path / "live"
    live.mkdir()
    (live / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    viewer = TestClient(create_viewer_app([live]))
    assert viewer.get("/api/runs/0/metrics").json()["next"] == 1
    with open(live / "metrics.jsonl", "a") as f:  # a step lands, the next one half written
        f.write(json.dumps({"stage": "rl", "step": 2, "reward": 0.5}) + "\n{\"stage\": ")
    assert viewer.get("/api/runs/0/metrics?after=1").json() == {
        "rows": [{"stage": "rl", "step": 2, "reward": 0.5}], "next": 2}
    with open(live / "metrics.jsonl", "a") as f:
        f.write('"rl", "step": 3, "reward": 0.75}\n')
    assert viewer.get("/api/runs/0/metrics?after=2").json()["rows"] == [
        {"stage": "rl", "step": 3, "reward": 0.75}]
    (listed,) = viewer.get("/api/runs").json()["runs"]
    assert listed["stages"] == ["rl"] and listed["episodes"] is False  # none saved (yet)
    assert client.get("/api/runs").json()["runs"][0]["episodes"] is True


def test_episodes_are_filtered_sorted_and_paged(run, client):
    episodes = list(read_episodes(run / "episodes.jsonl"))
    assert len(episodes) == 2 * 2 * 3
    page = client.get("/api/runs/0/episodes?limit=5").json()
    assert page["total"] == 12 and [e["index"] for e in page["episodes"]] == [0, 1, 2, 3, 4]
    assert [e["step"] for e in page["episodes"]] == [1, 1, 1, 1, 1]
    by_reward = client.get("/api/runs/0/episodes?sort=-reward&limit=500").json()["episodes"]
    assert [e["reward"] for e in by_reward] == sorted((e.reward for e in episodes),
                                                      reverse=True)
    second = client.get("/api/runs/0/episodes?step_min=2&offset=2&limit=3").json()
    assert second["total"] == 6 and [e["index"] for e in second["episodes"]] == [8, 9, 10]
    high = client.get("/api/runs/0/episodes?reward_min=0.05&limit=500").json()
    assert high["total"] == sum(e.reward >= 0.05 for e in episodes)
    lengths = [e["length"] for e in client.get(
        "/api/runs/0/episodes?sort=length&limit=500").json()["episodes"]]
    assert lengths == sorted(sum(s.loss_mask) for e in episodes for s in e.segments)
    assert client.get("/api/runs/0/episodes?finish=timeout").json()["total"] == 0
    # the arithmetic task names its family ("domain"): one task, its filter keeps all
    every = client.get("/api/runs/0/episodes?task=addition").json()
    assert every["tasks"] == ["addition"] and every["total"] == 12
    assert client.get("/api/runs/0/episodes?task=tau").json()["total"] == 0
    short = client.get("/api/runs/0/episodes?length_max=3&limit=500").json()
    assert short["total"] == sum(sum(s.loss_mask) <= 3 for e in episodes for s in e.segments)
    assert client.get("/api/runs/0/episodes?length_min=1&length_max=6").json()["total"] == 12


def test_one_episode_token_by_token(run, client):
    episode = list(read_episodes(run / "episodes.jsonl"))[7]
    got = client.get("/api/runs/0/episodes/7").json()
    (seg,) = episode.segments
    (tokens,) = [s["tokens"] for s in got["segments"]]
    assert len(tokens) == len(seg.token_ids)
    assert [t["trained"] for t in tokens] == [bool(m) for m in seg.loss_mask]
    assert [t["logprob"] for t in tokens if t["trained"]] == [
        lp for lp, m in zip(seg.logprobs, seg.loss_mask) if m]
    assert all(t["logprob"] is None and t["version"] is None
               for t in tokens if not t["trained"])
    assert got["rewards"] == episode.rewards and got["step"] == 2
    assert "".join(t["text"] for t in tokens).count("<|im_start|>") >= 1


def test_a_group_side_by_side_with_its_normalised_rewards(run, client):
    first = client.get("/api/runs/0/episodes/3").json()
    got = client.get(f"/api/runs/0/groups?step={first['step']}&group={first['group']}").json()
    rewards = [e["reward"] for e in got["episodes"]]
    assert len(rewards) == 3 and 3 in [e["index"] for e in got["episodes"]]
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)  # GRPO's: ddof=1
    assert [e["advantage"] for e in got["episodes"]] == pytest.approx(
        [(r - mean) / (std + 1e-6) for r in rewards], abs=1e-12)
    assert all(isinstance(e["response"], str) for e in got["episodes"])


def test_bad_requests_say_what_is_wrong(client):
    assert client.get("/api/runs/3/metrics").status_code == 404
    missing = client.get("/api/runs/0/episodes/99")
    assert missing.status_code == 404 and "12 episodes" in missing.json()["detail"]
    assert client.get("/api/runs/0/episodes?sort=fast").status_code == 422
    assert "not a number" in client.get("/api/runs/0/episodes?reward_min=high").json()["detail"]


def test_traced_episodes_carry_advantages_and_trainer_logprobs(run, client):
    """``rl.token_stats`` (4 a step): each traced episode's trained tokens hold its GRPO
    advantage ``(r - mean) / (std + 1e-6)`` (std with ddof=1) and the trainer's log-prob of
    the token before the update, which in synchronous RL is the sampling policy's."""
    episodes = list(read_episodes(run / "episodes.jsonl"))
    traced = [i for i, e in enumerate(episodes) if "token_stats" in e.meta]
    assert len(traced) == 2 * 4
    for i in traced:
        e = episodes[i]
        # the estimator reads the rewards as float32 (advantage_inputs), computes in float64
        group = [float(torch.tensor(g.reward, dtype=torch.float32)) for g in episodes
                 if g.group_id == e.group_id and g.meta["step"] == e.meta["step"]]
        reward = float(torch.tensor(e.reward, dtype=torch.float32))
        want = (reward - statistics.fmean(group)) / (statistics.stdev(group) + 1e-6)
        # float64 arithmetic rounded once to float32 (half an eps32 of |A|), and two float64
        # means summed in different orders (a few eps64 of the rewards, over std + 1e-6)
        bound = (EPS32 / 2 * abs(want)
                 + 4 * EPS64 * max(map(abs, group)) / (statistics.stdev(group) + 1e-6))
        got = client.get(f"/api/runs/0/episodes/{i}").json()
        assert got["token_stats"] is True
        trained = [t for s in got["segments"] for t in s["tokens"] if t["trained"]]
        assert trained and all(abs(t["advantage"] - want) <= bound for t in trained)
        # engine and trainer: two float32 forwards of the same log-probs in different orders
        # (docs/testing.md): 16 eps32 of the largest |log-prob| compared
        largest = max(abs(t["logprob"]) for t in trained)
        assert all(abs(t["mismatch"]) <= 16 * EPS32 * largest for t in trained)
        assert all(t["mismatch"] == t["logprob"] - t["trainer_logprob"] for t in trained)
    untraced = client.get(f"/api/runs/0/episodes/{min(set(range(12)) - set(traced))}").json()
    assert untraced["token_stats"] is False
    assert all(t["advantage"] is None for s in untraced["segments"] for t in s["tokens"])


def test_traced_stats_are_the_sampling_policys_in_float64(run, client):
    """Step 1 sampled from the base model: a float64 forward pass of it gives each traced
    token's log-prob and its distribution's entropy (temperature 1, no truncation)."""
    from posttrain.models import load_model

    model = load_model(run / "base_model").double().eval()
    episodes = list(read_episodes(run / "episodes.jsonl"))
    traced = [i for i, e in enumerate(episodes) if "token_stats" in e.meta
              and e.meta["step"] == 1]
    for i in traced:
        (seg,) = episodes[i].segments
        with torch.no_grad():
            logits = model(torch.tensor([seg.token_ids])).logits[0, :-1]
        logp = torch.log_softmax(logits, dim=-1)
        entropy = -(logp.exp() * logp).sum(-1)
        got = [t for t in client.get(f"/api/runs/0/episodes/{i}").json()["segments"][0]
               ["tokens"]]
        # float32 trainer vs float64 reference (docs/testing.md): 2 eps32 a chained reduction
        # of the largest logit; the nano Llama's chain is 2 layers x 9, the final norm and the
        # head (as tests/integration/test_decoders.py counts it)
        logit_error = 2 * EPS32 * (2 * 9 + 2) * float(logits.abs().max())
        # the float32 log-softmax's and entropy sum's own rounding: 2 eps32 of the largest
        # |log-prob| (the logsumexp's size)
        rounding = 2 * EPS32 * float(logp.abs().max())
        for pos in (p for p, m in enumerate(seg.loss_mask) if m):
            want, h = float(logp[pos - 1, seg.token_ids[pos]]), float(entropy[pos - 1])
            # a log-prob is a logit minus a logsumexp: twice the logits' error
            assert abs(got[pos]["trainer_logprob"] - want) <= 2 * logit_error + rounding
            # dH/dz_j = -p_j (log p_j + H): at most 2 H times the logits' error
            assert abs(got[pos]["entropy"] - h) <= 2 * h * logit_error + rounding


def test_each_rl_step_reports_its_throughput(run):
    """``perf/sampled_tokens_per_s`` is the step's sampled (trained) tokens over its wall
    time ``perf/step_s``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    episodes = list(read_episodes(run / "episodes.jsonl"))
    for row in rows:
        tokens = sum(sum(s.loss_mask) for e in episodes if e.meta["step"] == row["step"]
                     for s in e.segments)
        assert row["perf/step_s"] > 0
        assert row["perf/sampled_tokens_per_s"] * row["perf/step_s"] == pytest.approx(tokens)

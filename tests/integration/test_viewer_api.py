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
LOCAL = "http://127.0.0.1"  # the host the viewer listens on: others are refused


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # rewards that differ within a group: the advantages checked below are not all 0
    return recorded_run(tmp_path_factory.mktemp("viewer") / "run", ODD_LENGTH)


@pytest.fixture
def client(run):
    return TestClient(create_viewer_app([run]), base_url=LOCAL)


def test_metrics_follow_a_run_that_is_still_writing(run, tmp_path, client):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    got = client.get("/api/runs/0/metrics").json()
    assert got == {"rows": rows, "next": len(rows), "warnings": [], "skipped": 0}
    live = tmp_path / "live"
    live.mkdir()
    (live / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    viewer = TestClient(create_viewer_app([live]), base_url=LOCAL)
    assert viewer.get("/api/runs/0/metrics").json()["next"] == 1
    with open(live / "metrics.jsonl", "a") as f:  # a step lands, the next one half written
        f.write(json.dumps({"stage": "rl", "step": 2, "reward": 0.5}) + "\n{\"stage\": ")
    assert viewer.get("/api/runs/0/metrics?after=1").json() == {
        "rows": [{"stage": "rl", "step": 2, "reward": 0.5}], "next": 2, "warnings": [],
        "skipped": 0}
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


def copy_records(run, to, *, episodes=None, metrics=None):
    """A run folder with ``run``'s records (or the lines given), and no model in it."""
    to.mkdir()
    for name, lines in (("episodes.jsonl", episodes), ("metrics.jsonl", metrics)):
        text = (run / name).read_text() if lines is None else "".join(lines)
        (to / name).write_text(text)
    return to


def test_a_run_without_a_tokenizer_shows_curves_and_the_right_episodes(run, tmp_path):
    """An RL run from model.path has no tokenizer in its folder until its end: the run list
    and the curves need none, episode rows keep their places (each failed refresh stored a
    position without its summary, and row "step 7" opened step 6's), and once its config.yaml
    names a model.path the texts come."""
    live = copy_records(run, tmp_path / "live")
    viewer = TestClient(create_viewer_app([live]), base_url=LOCAL)
    assert viewer.get("/api/runs").status_code == 200
    assert viewer.get("/api/runs/0/metrics").json()["next"] > 0
    for _ in range(3):
        page = viewer.get("/api/runs/0/episodes?limit=500").json()
    assert page["total"] == 12 and page["texts"] is False
    assert all(e["prompt"] == "" for e in page["episodes"])
    assert viewer.get("/api/runs/0/episodes/7").status_code == 409
    (live / "config.yaml").write_text(f"model: {{path: {run / 'base_model'}}}\n")
    episodes = list(read_episodes(run / "episodes.jsonl"))
    for row in viewer.get("/api/runs/0/episodes?limit=500").json()["episodes"]:
        detail = viewer.get(f"/api/runs/0/episodes/{row['index']}").json()
        assert (detail["step"], detail["reward"]) == (row["step"], row["reward"])
        assert detail["rewards"] == episodes[row["index"]].rewards
        assert row["prompt"] and "What is" in row["prompt"]


def test_a_malformed_line_is_skipped_with_a_warning_and_shifts_nothing(run, tmp_path):
    metrics = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    episodes = (run / "episodes.jsonl").read_text().splitlines(keepends=True)
    broken = copy_records(run, tmp_path / "broken", metrics=[metrics[0], "{oops\n", *metrics[1:]],
                          episodes=[*episodes[:5], "not json\n", "[1, 2]\n", *episodes[5:]])
    viewer = TestClient(create_viewer_app([broken]), base_url=LOCAL)
    got = viewer.get("/api/runs/0/metrics").json()
    assert got["rows"] == [json.loads(line) for line in metrics]  # none lost, before or after
    assert got["warnings"] == [("metrics.jsonl line 2: invalid JSON (Expecting property name "
                                "enclosed in double quotes at column 2), skipped")]
    (broken / "config.yaml").write_text(f"model: {{path: {run / 'base_model'}}}\n")
    page = viewer.get("/api/runs/0/episodes?limit=500").json()
    assert page["total"] == 12 and page["skipped"] == 3 and page["warnings"][1:] == [
        "episodes.jsonl line 6: invalid JSON (Expecting value at column 1), skipped",
        "episodes.jsonl line 7: not a JSON object (a list), skipped"]
    reference = TestClient(create_viewer_app([run]), base_url=LOCAL)
    for index in (4, 5, 11):
        ours = viewer.get(f"/api/runs/0/episodes/{index}").json()
        assert ours == reference.get(f"/api/runs/0/episodes/{index}").json()


def test_filters_read_the_whole_prompt_the_response_and_what_the_run_holds(run, client):
    page = client.get("/api/runs/0/episodes?limit=500").json()
    assert page["finishes"] == sorted({e.finish_reason
                                       for e in read_episodes(run / "episodes.jsonl")})
    traced = sum(bool(e.meta.get("token_stats")) for e in read_episodes(run / "episodes.jsonl"))
    assert page["traced"] == traced and 0 < traced < 12 and page["count"] == 12
    assert client.get("/api/runs/0/episodes?q=user").json()["total"] == 12
    one = page["episodes"][0]
    first_word = one["response"].split()[0] if one["response"].split() else one["response"]
    found = client.get(f"/api/runs/0/episodes?response={first_word}&limit=500").json()
    assert one["index"] in [e["index"] for e in found["episodes"]]
    assert client.get("/api/runs/0/episodes?traced=yes").json()["total"] == traced
    assert client.get("/api/runs/0/episodes?traced=no").json()["total"] == 12 - traced
    assert client.get("/api/runs/0/episodes?traced=maybe").status_code == 422


def test_the_prompt_search_reads_the_whole_prompt(run, tmp_path, tokenizer):
    """A long prompt's opening words are found (the search read its last 120 characters)."""
    from posttrain.types import Episode, Segment, write_episodes

    long = copy_records(run, tmp_path / "long", episodes=[])
    (long / "config.yaml").write_text(f"model: {{path: {run / 'base_model'}}}\n")
    prompt = tokenizer.encode("Find the needle. " + "hay " * 100 + "What is 1+1?",
                              add_special_tokens=False)
    answer = tokenizer.encode("2", add_special_tokens=False)
    write_episodes(long / "episodes.jsonl", [Episode([Segment(
        prompt + answer, [0] * len(prompt) + [1] * len(answer), [0.0] * len(prompt) +
        [-0.5] * len(answer), [-1] * len(prompt) + [0] * len(answer))], meta={"step": 1})])
    viewer = TestClient(create_viewer_app([long]), base_url=LOCAL)
    assert viewer.get("/api/runs/0/episodes?q=needle").json()["total"] == 1


def test_tokens_of_a_character_split_over_bytes_read_as_the_text(tokenizer):
    from posttrain.viewer.views import token_texts

    text = "é 日本 🙂 done"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert any("\ufffd" in tokenizer.decode([t]) for t in ids)  # one by one: broken
    texts = token_texts(tokenizer, ids)
    assert "".join(texts) == text and len(texts) == len(ids)


def test_the_viewer_answers_only_its_own_host_and_fetches_nothing(client):
    assert client.get("/api/runs", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/docs").status_code == 404 and client.get("/openapi.json").status_code \
        == 404
    html = client.get("/").text
    assert "http://" not in html and "https://" not in html


def test_runs_are_named_apart_and_a_folder_of_runs_opens_them_all(run, tmp_path):
    from posttrain.viewer import runs_under
    from posttrain.viewer.app import run_names

    for parent in ("a", "b"):
        copy_records(run, (tmp_path / parent).mkdir() or tmp_path / parent / "qs")
    assert run_names([tmp_path / "a" / "qs", tmp_path / "b" / "qs"]) == ["a/qs", "b/qs"]
    assert runs_under(tmp_path) == [tmp_path / "a" / "qs", tmp_path / "b" / "qs"]
    assert runs_under(tmp_path / "a" / "qs") == [tmp_path / "a" / "qs"]


def test_the_summary_and_config_and_a_groups_prompt(run, client):
    got = client.get("/api/runs/0/summary").json()
    assert got["summary"] == json.loads((run / "summary.json").read_text())
    assert got["config"]["rl"]["steps"] == 2
    first = client.get("/api/runs/0/episodes/3").json()
    group = client.get(f"/api/runs/0/groups?step={first['step']}&group={first['group']}").json()
    assert "What is" in group["prompt"] and group["reference"] is not None
    assert group["advantage_source"] == "grpo, recomputed (the run's estimator: grpo)"

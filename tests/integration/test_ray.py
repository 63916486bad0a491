"""Rollout engines as Ray actors on a local cluster: the same answers as in-process engines,
and a rollout worker killed mid-run loses no sample and counts none twice."""

import copy

import pytest
import torch
from async_helpers import length_reward, rl_config, train  # noqa: F401 (fixture)

from posttrain.cluster import RayTrainer, close_engines, launch_engines, ray_session
from posttrain.config import DistConfig, OptimConfig
from posttrain.engines import EngineRestarted, TorchEngine, row_seeds, weights_checksum
from posttrain.models import encode_prompt
from posttrain.recipes.rl import run_async_rl
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.train import Trainer
from posttrain.types import SamplingParams, read_episodes

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
# An engine in another process (other threads, other batching) and an in-process one are two
# float32 computations of the same log-probs: within 16 eps32 of the largest (~8 chained
# float32 reductions through the 2-layer model, head and logsumexp, ~2 eps32 each).
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


@pytest.fixture(scope="module")
def cluster():
    with ray_session(DistConfig(backend="ray"), num_cpus=2):
        yield


def engines(tiny_dir, tokenizer, n=1, placement="colocated", transport="object_store",
            **fault):
    cfg = DistConfig(backend="ray", engines=n, placement=placement, weight_transport=transport)
    return launch_engines(cfg, tiny_dir, "float32", tokenizer.pad_token_id,
                          tokenizer.eos_token_id, **fault)


def prompts(tokenizer, n):
    return [encode_prompt(tokenizer, [{"role": "user", "content": f"What is {i}+2?"}])
            for i in range(n)]


def test_ray_engine_answers_like_the_local_engine(cluster, tiny_dir, model, tokenizer):
    (remote,) = engines(tiny_dir, tokenizer, placement="disaggregated")
    local = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    sampling, seeds = SamplingParams(max_new_tokens=8), row_seeds(4, 3)
    a = remote.generate(prompts(tokenizer, 3), sampling, seeds)
    b = local.generate(prompts(tokenizer, 3), sampling, seeds)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    largest = max(abs(x) for o in b for x in o.logprobs)
    torch.testing.assert_close([o.logprobs for o in a], [o.logprobs for o in b],
                               atol=16 * EPS32 * largest, rtol=0)
    assert remote.weights_checksum() == local.weights_checksum()
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    probe = a[0].prompt_ids + a[0].token_ids
    report = sync_weights(Trainer(model, OptimConfig(), 1), remote, 7, [probe])
    bound = 16 * EPS32 * max(abs(x) for x in local.score([probe])[0])  # mean |difference|
    assert remote.version == 7 and report.mismatch < bound
    assert remote.weights_checksum() != local.weights_checksum()
    close_engines([remote])


def test_a_sleeping_engine_actor_refuses_work_and_wakes_with_the_sync(cluster, tiny_dir, model,
                                                                      tokenizer):
    from posttrain.engines.sleep import EngineAsleepError

    (remote,) = engines(tiny_dir, tokenizer)
    sampling = SamplingParams(max_new_tokens=4)
    before = remote.generate(prompts(tokenizer, 2), sampling, [1, 2])
    remote.sleep()
    with pytest.raises(EngineAsleepError, match="asleep"):
        remote.generate(prompts(tokenizer, 2), sampling, [1, 2])
    remote.update_weights(model.named_parameters(), 1)
    assert remote.weights_checksum() == weights_checksum(model.named_parameters())
    assert [o.token_ids for o in remote.generate(prompts(tokenizer, 2), sampling, [1, 2])] == \
        [o.token_ids for o in before]
    close_engines([remote])


@pytest.mark.parametrize("transport", ["object_store", "collective"])
@pytest.mark.parametrize("bucket_bytes", [256 << 20, 1], ids=["one-bucket", "a-bucket-a-tensor"])
def test_a_killed_engine_actor_comes_back_with_the_weights_it_had(cluster, tiny_dir, model,
                                                                   tokenizer, tmp_path,
                                                                   bucket_bytes, transport):
    """(Weights go in buckets of ``bucket_bytes``: one, or one per tensor, through the object
    store or broadcast over a gloo group; the restore after the restart sends them again.)"""
    (remote,) = engines(tiny_dir, tokenizer, transport=transport, fail_at_call=2,
                        fail_marker=str(tmp_path / "crashed"))
    remote.bucket_bytes = bucket_bytes
    with torch.no_grad():
        next(model.parameters()).mul_(1.5)
    remote.update_weights(model.named_parameters(), 3)
    before = remote.weights_checksum()
    assert before == weights_checksum(model.named_parameters())
    if transport == "object_store":
        assert len(remote._last[0]) == (1 if bucket_bytes > 1 else len(list(model.parameters())))
    sampling = SamplingParams(max_new_tokens=4)
    first = remote.generate(prompts(tokenizer, 1), sampling, [1])
    with pytest.raises(EngineRestarted):
        remote.generate(prompts(tokenizer, 1), sampling, [1])  # the process dies in this call
    assert (tmp_path / "crashed").exists()
    assert remote.weights_checksum() == before and remote.version == 3
    assert remote.generate(prompts(tokenizer, 1), sampling, [1])[0].token_ids == \
        first[0].token_ids


@pytest.mark.parametrize("transport", ["object_store", "collective"])
def test_async_run_on_two_ray_engines_matches_the_local_run(cluster, tiny_dir, model,
                                                            tokenizer, tmp_path, transport):
    cfg = rl_config(max_staleness=0, chunk_tokens=4, partial_rollout=False)
    local_model, local_log = train(run_async_rl, copy.deepcopy(model), tokenizer,
                                   tmp_path / "local", cfg)
    remote = engines(tiny_dir, tokenizer, n=2, transport=transport)
    ray_model, ray_log = train(run_async_rl, copy.deepcopy(model), tokenizer, tmp_path / "ray",
                               cfg, engine=remote)
    assert all(e.version == cfg.steps for e in remote)  # every step's weights were sent
    assert [r["reward"] for r in ray_log] == [r["reward"] for r in local_log]
    # Exact: the local trainer runs the same float32 arithmetic on the same episodes in the
    # same order (the engines' log-probs only feed the mismatch metrics). A tolerance could not
    # absorb a rounding difference anyway: Adam's m / (sqrt(v) + eps) amplifies it by up to
    # lr / eps_adam on near-zero gradients (~1e-4, see test_data_parallel.py).
    for p, q in zip(local_model.parameters(), ray_model.parameters()):
        torch.testing.assert_close(q, p, atol=0, rtol=0)


def test_a_rollout_worker_killed_mid_run_loses_no_sample_and_counts_none_twice(
        cluster, tiny_dir, model, tokenizer, tmp_path):
    cfg = rl_config(max_staleness=1, chunk_tokens=2, partial_rollout=True).model_copy(
        update={"save_episodes": True})
    remote = engines(tiny_dir, tokenizer, n=2, fail_at_call=3,
                     fail_marker=str(tmp_path / "crashed"))
    _, log = train(run_async_rl, model, tokenizer, tmp_path / "run", cfg, engine=remote)
    assert (tmp_path / "crashed").exists()  # one actor died in its third generate call
    assert log[-1]["async/restarts"] == 1 and log[-1]["async/requeued"] > 0
    assert log[-1]["async/duplicates"] == 0
    episodes = read_episodes(tmp_path / "run" / "episodes.jsonl")
    ids = [e.meta["sample_id"] for e in episodes]
    assert len(ids) == len(set(ids)) == cfg.steps * cfg.prompts_per_step * cfg.group_size
    groups = {i.split(":")[0] for i in ids}
    assert all(sum(i.startswith(f"{g}:") for i in ids) == cfg.group_size for g in groups)


def test_a_trainer_actor_trains_like_the_local_trainer(cluster, tiny_dir, model, tokenizer,
                                                       tmp_path):
    cfg = rl_config(max_staleness=0)
    local_model, local_log = train(run_async_rl, copy.deepcopy(model), tokenizer,
                                   tmp_path / "local", cfg)
    remote = RayTrainer(copy.deepcopy(model), cfg.optim, cfg.steps)
    _, ray_log = train(run_async_rl, None, tokenizer, tmp_path / "ray", cfg,
                       engine=engines(tiny_dir, tokenizer), trainer=remote)
    assert [r["reward"] for r in ray_log] == [r["reward"] for r in local_log]
    # Exact: the actor runs the same trainer code with the driver's thread count on the same
    # weights and episodes, so the same float32 arithmetic (a tolerance could not absorb a
    # rounding difference: Adam amplifies it by up to lr / eps_adam, ~1e-4)
    for p, q in zip(local_model.parameters(), remote.model.parameters()):
        torch.testing.assert_close(q, p, atol=0, rtol=0)
    assert max(float((p - q).detach().abs().max()) for p, q in zip(
        model.parameters(), remote.model.parameters())) > 1e-3  # the actor trained


def test_a_teacher_served_by_a_ray_actor_scores_like_the_in_process_teacher(
        cluster, tiny_dir, model, tokenizer):
    """Multi-teacher OPD with teachers as their own engine actors: the log-probs they give the
    student's sampled tokens are the in-process teacher's."""
    from posttrain.envs import ArithmeticTasks
    from posttrain.recipes.distillation.teachers import Samples, Teacher, route, sampled_logprobs
    from posttrain.rewards import RewardFunction
    from posttrain.rollout.single_turn import rollout
    from posttrain.types import Batch

    tasks = ArithmeticTasks(("+",), 2).eval_set(3)
    student = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    episodes = rollout(student, tokenizer, tasks, RewardFunction({"c": ("numeric", 1.0)}),
                       SamplingParams(max_new_tokens=6, temperature=1.0, seed=1), 2)
    samples = Samples(episodes, [t for t in tasks for _ in range(2)])
    batch = Batch.from_episodes(episodes, tokenizer.pad_token_id)
    (remote,) = engines(tiny_dir, tokenizer)
    got = [sampled_logprobs([t], route([t], episodes), samples, batch, tokenizer)
           for t in (Teacher("ray", engine=remote), Teacher("local", copy.deepcopy(model)))]
    assert got[0].abs().sum() > 0
    torch.testing.assert_close(got[0], got[1], atol=16 * EPS32 * float(got[1].abs().max()),
                               rtol=0)


def test_disaggregated_engines_take_one_bundle_each_of_a_placement_group(cluster, tiny_dir,
                                                                          model, tokenizer):
    import ray

    remote = engines(tiny_dir, tokenizer, n=2, placement="disaggregated")
    groups = {ray.get(e.actor.placement_group.remote()) for e in remote}
    assert len(groups) == 1 and None not in groups  # one group holds both
    (group,) = groups
    table = ray.util.placement_group_table()[group]
    assert table["state"] == "CREATED" and table["strategy"] == "PACK"
    assert list(table["bundles"].values()) == [{"CPU": 1.0}, {"CPU": 1.0}]
    local = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    sampling = SamplingParams(max_new_tokens=4)
    assert remote[1].generate(prompts(tokenizer, 2), sampling, [3, 4]) == \
        local.generate(prompts(tokenizer, 2), sampling, [3, 4])
    close_engines(remote)  # the reservation goes back: the cluster can hold both again
    assert ray.util.placement_group_table()[group]["state"] == "REMOVED"
    close_engines(engines(tiny_dir, tokenizer, n=2, placement="disaggregated"))


def test_engines_the_cluster_cannot_hold_are_an_error_not_a_hang(cluster, tiny_dir, tokenizer):
    cfg = DistConfig(backend="ray", engines=2, placement="disaggregated", cpus_per_engine=2,
                     placement_timeout_s=2)
    with pytest.raises(RuntimeError, match=r"2 engine bundles of \{'CPU': 2.0\} \(pack\) could "
                                           r"not be placed within .*=2 s"):
        launch_engines(cfg, tiny_dir, "float32", tokenizer.pad_token_id,
                       tokenizer.eos_token_id)


def test_an_engine_actor_runs_the_engine_its_member_builds(cluster, tiny_dir, tokenizer,
                                                           tmp_path):
    """A user's engine member (by dotted path) runs in the actor: its log records the actor's
    calls, and it answers like the in-process engine it wraps."""
    from posttrain.config import load_config

    log = tmp_path / "calls.log"
    cfg = load_config(None, ["engine.name=examples/extensions/families.py:LoggedTorch",
                             f"engine.log={log}", "dist.backend=ray"])
    (remote,) = launch_engines(cfg.dist, tiny_dir, "float32", tokenizer.pad_token_id,
                               tokenizer.eos_token_id, cfg.engine)
    try:
        sampling = SamplingParams(max_new_tokens=4)
        (local,) = engines(tiny_dir, tokenizer)
        assert remote.generate(prompts(tokenizer, 3), sampling, [1, 2, 3]) == \
            local.generate(prompts(tokenizer, 3), sampling, [1, 2, 3])
        assert log.read_text() == "3\n"  # the member's engine, in the actor
    finally:
        close_engines([remote, local])


def test_colocated_engines_asking_for_gpus_the_cluster_lacks_fail_at_once(cluster, tiny_dir,
                                                                         tokenizer):
    """A colocated engine's share of the trainer's GPU (``gpus_per_engine``): on a cluster
    without GPUs an error naming what is missing, where Ray would wait for ever."""
    cfg = DistConfig(backend="ray", engines=2, gpus_per_engine=0.5)
    with pytest.raises(RuntimeError, match="want 1 GPUs in all .* the cluster has 0"):
        launch_engines(cfg, tiny_dir, "float32", tokenizer.pad_token_id,
                       tokenizer.eos_token_id)

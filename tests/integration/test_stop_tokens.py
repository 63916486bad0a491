"""The tokens that end a model's reply: its tokenizer's eos and the ``eos_token_id`` list of
its ``generation_config.json`` (an instruct model's end of turn, such as Gemma's
``<end_of_turn>``), kept by ``load_tokenizer`` and stopping every sampling path (issue 57)."""

import json

from posttrain.config import EvalConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.models import build_tiny, load_model, load_tokenizer, stop_tokens
from posttrain.rewards import RewardFunction
from posttrain.rollout.evaluation import eval_episodes

TASKS = ArithmeticTasks(("+",), 1).eval_set(4)
REWARD = RewardFunction({"correct": ("numeric", 1.0)})
GREEDY = EvalConfig(num_problems=4, max_new_tokens=12)


def completions(model_dir) -> list[tuple[list[int], str]]:
    """Each held-out task's greedy completion (its token ids) and how it ended."""
    tok = load_tokenizer(model_dir)
    engine = TorchEngine(load_model(model_dir), tok.pad_token_id, tok.eos_token_id)
    episodes = eval_episodes(engine, tok, TASKS, REWARD, GREEDY)
    return [([t for t, m in zip(e.segments[0].token_ids, e.segments[0].loss_mask) if m],
             e.finish_reason) for e in episodes]


def test_the_generation_configs_end_of_turn_ends_a_reply(tmp_path):
    directory = build_tiny(tmp_path / "m", "nano", seed=3)
    tok = load_tokenizer(directory)
    assert stop_tokens(tok) == (tok.eos_token_id,)
    before = completions(directory)
    long = next((ids, how) for ids, how in before if len(ids) > 2)
    turn_end = long[0][1]  # a token the model says second: now an end of turn
    config = directory / "generation_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "eos_token_id": [tok.eos_token_id, turn_end]}))
    assert stop_tokens(load_tokenizer(directory)) == (tok.eos_token_id, turn_end)
    after = completions(directory)
    for (ids, _), (cut, how) in zip(before, after):
        end = next((i for i, t in enumerate(ids) if t == turn_end), None)
        if end is None:  # it never says it: the same reply
            assert cut == ids
        else:  # the reply ends there, the end-of-turn token its last
            assert (cut, how) == (ids[: end + 1], "stop")
    assert any(len(cut) < len(ids) for (ids, _), (cut, _) in zip(before, after))

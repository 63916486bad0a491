"""Per-row tools of dataset prompts: a row's ``tools`` column (OpenAI tool schemas) is
rendered into its prompt through the chat template and selects which tools of ``agent.tools``
its episodes may call; a row naming a tool ``agent.tools`` does not implement is a data error
naming the row. With ``task.env`` the row reaches the environment's constructor."""

import json
from pathlib import Path

import pytest
from agent_helpers import ScriptedEngine

from posttrain.config import load_config
from posttrain.recipes.run_tasks import rollout_function, task_family
from posttrain.rewards import RewardFunction
from posttrain.types import SamplingParams
from posttrain.types.errors import DataError

IMPLS = Path(__file__).with_name("tool_impls.py")
HERE = Path(__file__).parent


def schema(name, description, params=("a", "b")):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "required": list(params), "properties": {
            p: {"type": "integer", "description": p} for p in params}}}}


ROWS = [
    {"id": "add_only", "prompt": "What is 2+3?", "answer": "5",
     "tools": [schema("add", "Add two numbers (this row's wording).")]},
    {"id": "all", "prompt": "What is 2*3?", "answer": "6", "tools": None},
    {"id": "mul_only", "prompt": "What is 4*3?", "answer": "12",
     "tools": [schema("mul", "Multiply.")]},
]


def dataset(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(path, tools=("add", "mul"), *overrides):
    listed = ", ".join(f"{IMPLS}:{t}" for t in tools)
    return load_config("configs/quickstart.yaml", [
        "stages=[rl]", "task.name=dataset", f"task.data.path={path}",
        f"task.data.eval_path={path}", "task.data.shuffle=false", f"agent.tools=[{listed}]",
        *overrides])


def play(cfg, tokenizer, row_id, replies):
    family = task_family(cfg)
    tasks, tools, env_factory = family.tasks, family.tools, family.env_factory
    (task,) = [t for t in tasks.splits["train"] if t.row["id"] == row_id]
    engine = ScriptedEngine(tokenizer, replies)
    (ep,) = rollout_function(cfg, tools, env_factory)(
        engine, tokenizer, [task], RewardFunction.of(cfg.reward), SamplingParams(max_new_tokens=64))
    return [tokenizer.decode(p) for p in engine.prompts], ep


def call(name, a, b):
    return f'<tool_call>{{"name": "{name}", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'


def test_a_rows_tools_are_rendered_and_are_the_only_ones_it_may_call(tmp_path, tokenizer):
    cfg = config(dataset(tmp_path, ROWS))
    prompts, ep = play(cfg, tokenizer, "add_only",
                       [call("mul", 2, 3), call("add", 2, 3), "<answer>5</answer>"])
    assert "Tools: add(a, b)\n" in prompts[0] and "mul(" not in prompts[0]
    assert ep.meta["tools"] == [ROWS[0]["tools"][0]]  # rendered with the row's own schema
    assert "unknown tool 'mul'; available: add" in prompts[1]
    assert "<|im_start|>tool\n5<|im_end|>" in prompts[2]  # add ran: agent.tools implements it
    assert ep.rewards["correct"] == 1.0
    rendered = tokenizer.apply_chat_template(
        ep.meta["messages"], tools=ROWS[0]["tools"], tokenize=False)
    assert tokenizer.decode(ep.segments[0].token_ids) + "\n" == rendered


def test_a_row_without_tools_gets_every_tool_and_another_row_its_own(tmp_path, tokenizer):
    cfg = config(dataset(tmp_path, ROWS))
    prompts, _ = play(cfg, tokenizer, "all", ["<answer>6</answer>"])
    assert "Tools: add(a, b) mul(a, b)" in prompts[0]
    prompts, ep = play(cfg, tokenizer, "mul_only", [call("mul", 4, 3), "<answer>12</answer>"])
    assert "Tools: mul(a, b)\n" in prompts[0] and "<|im_start|>tool\n12<|im_end|>" in prompts[1]


@pytest.mark.parametrize("tools,rows,says", [
    (("add",), ROWS, "the dataset row with the prompt 'What is 4*3?' offers the tool 'mul', "
                     "which agent.tools does not implement (it has: add)"),
    (("add", "mul"), [*ROWS, {"id": "bad", "prompt": "What is 1+1?", "answer": "2",
                              "tools": [{"type": "function", "function": {"description": "?"}}]}],
     "the dataset row with the prompt 'What is 1+1?': column 'tools': a tool schema needs "
     "function.name"),
])
def test_a_row_whose_tools_cannot_run_is_a_data_error_naming_it(tmp_path, tools, rows, says):
    with pytest.raises(DataError) as err:
        task_family(config(dataset(tmp_path, rows), tools))
    assert says in str(err.value)


def test_a_single_turn_run_on_rows_with_tools_is_refused(tmp_path):
    path = dataset(tmp_path, ROWS)
    cfg = load_config("configs/quickstart.yaml", [
        "stages=[rl]", "task.name=dataset", f"task.data.path={path}",
        f"task.data.eval_path={path}"])
    with pytest.raises(DataError, match="offers the tool 'add', which agent.tools does not "
                                        r"implement \(it has: none\)"):
        task_family(cfg)


def test_an_environment_is_constructed_with_the_row(tmp_path, tokenizer):
    from posttrain.config.extension import load_object

    envs = HERE / "user_envs.py"
    guess = load_object(f"{envs}:Guess")
    guess.made.clear()
    cfg = config(dataset(tmp_path, ROWS), ("add", "mul"), f"task.env={envs}:Guess",
                 "reward.parts.solved={verifier: env}")
    prompts, ep = play(cfg, tokenizer, "add_only", ["<answer>5</answer>"])
    ((reference, row, closed),) = guess.made
    assert (reference, row["id"], closed) == ("5", "add_only", True)
    assert "Tools: add(a, b) hint()" in prompts[0]  # the row's tool and the environment's own
    assert ep.rewards["solved"] == 1.0

"""Reward functions named by dotted path: each takes what it names (sample fields, dataset
columns), per sample or batched, sync or async; returns a number, a dict of parts or None. A
crash, a timeout or a bad value leaves the part missing with its reason, and a missing part
takes its group's mean."""

import pytest

from posttrain.rewards import RewardFunction
from posttrain.rewards.user_reward import Sample
from posttrain.rollout.missing import fill_missing, missing_metrics
from posttrain.settings.extension import load_object
from posttrain.types import Episode, Segment

CODE = '''
import asyncio, time

calls = []

def by_column(completion, level, completion_ids, prompt):
    return float(len(completion) == level) + 0.5 * (prompt[-1]["role"] == "user") \\
        + 0.25 * (completion_ids == [1, 2])

def batched(completions, rows):
    return [float(r["level"]) for r in rows]

async def later(completion, reference):
    await asyncio.sleep(0.01)
    return float(completion == reference)

def parts(completion):
    calls.append(completion)
    return {"long": float(len(completion) > 2), "short": float(len(completion) <= 2)}

def none(completion):
    return None

def boom(completion):
    raise RuntimeError("bug in my reward")

def words(completion):
    return "yes"

def slow(completion):
    time.sleep(5)
    return 1.0

def short_batch(completions):
    return [1.0]

def old_style(text, ref):
    return float(text == ref)
'''


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(CODE)
    return str(path)


def samples():
    prompt = ({"role": "user", "content": "q"},)
    return [Sample("abc", "abc", (1, 2), prompt, {"level": 3}),
            Sample("x", "abc", (7,), prompt, {"level": 2})]


def score(module, fn, **kw):
    rf = RewardFunction({"r": (f"{module}:{fn}", 1.0)}, timeout_s=kw.pop("timeout_s", 30.0))
    return rf.score(samples())


def test_a_function_takes_fields_and_columns_by_name(module):
    got = [s.parts["r"] for s in score(module, "by_column")]
    assert got == [1.0 + 0.5 + 0.25, 0.0 + 0.5 + 0.0]


def test_batched_async_and_old_style_functions(module):
    assert [s.parts["r"] for s in score(module, "batched")] == [3.0, 2.0]
    assert [s.parts["r"] for s in score(module, "later")] == [1.0, 0.0]
    assert [s.parts["r"] for s in score(module, "old_style")] == [1.0, 0.0]


def test_parts_share_one_call_of_a_function_returning_a_dict(module):
    rf = RewardFunction({"long": (f"{module}:parts", 1.0), "short": (f"{module}:parts", 0.5)},
                        {"long": "long", "short": "short"})
    scored = rf.score(samples())
    assert [s.parts for s in scored] == [{"long": 1.0, "short": 0.0},
                                         {"long": 0.0, "short": 1.0}]
    assert [s.total for s in scored] == [1.0, 0.5]
    assert load_object(f"{module}:calls") == ["abc", "x"]  # once a sample, not once a part


@pytest.mark.parametrize("fn, reason", [
    ("none", "returned None"),
    ("boom", "RuntimeError: bug in my reward"),
    ("words", "returned 'yes', not a number"),
    ("short_batch", "returned list for a batch of 2, not a list of 2"),
    ("parts", "returned a dict: set the part's key"),
])
def test_a_failing_function_leaves_the_part_missing_with_its_reason(module, fn, reason):
    for scored in score(module, fn):
        assert scored.parts["r"] == 0.0 and reason in scored.missing["r"]


def test_a_function_that_outlives_its_timeout_is_missing(module):
    for scored in score(module, "slow", timeout_s=0.2):
        assert scored.missing == {"r": "TimeoutError: took over 0.2 s"}


def test_a_column_the_row_lacks_is_a_missing_part(module, tmp_path):
    rf = RewardFunction({"r": (f"{module}:by_column", 1.0)})
    (scored,) = rf.score([Sample("abc", "abc")])
    assert "asks for 'level'" in scored.missing["r"]


def test_a_missing_part_takes_its_groups_mean_and_is_counted(module):
    rf = RewardFunction({"r": (f"{module}:none", 1.0), "c": ("exact", 1.0)})

    def episode(group, r, missing):
        meta = {"fallible_parts": ["r"], **({"missing_parts": ["r"]} if missing else {})}
        return Episode([Segment([1, 2], [0, 1], [0.0, 0.0], [-1, 0])], {"r": r, "c": 1.0},
                       reward=r + 1.0, group_id=group, meta=meta)

    eps = [episode("a", 0.2, False), episode("a", 0.0, True), episode("a", 0.6, False),
           episode("b", 0.0, True)]
    fill_missing(eps, rf)
    assert [e.rewards["r"] for e in eps] == [0.2, pytest.approx(0.4), 0.6, 0.0]
    assert eps[1].reward == pytest.approx(1.4) and eps[3].reward == 1.0
    assert missing_metrics(eps) == {"reward/r/missing": 0.5}


def test_config_names_a_key_only_for_a_function():
    from posttrain.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="key picks an entry"):
        load_config(None, ["reward.parts.correct.verifier=numeric", "reward.parts.correct.key=x"])


def test_the_contract_is_checked_when_the_config_is_validated(module):
    from posttrain.config import ConfigError, load_config

    load_config(None, [f"reward.parts.correct.verifier={module}:batched"])
    with pytest.raises(ConfigError, match="is a list, not a reward function"):
        load_config(None, [f"reward.parts.correct.verifier={module}:calls"])


def test_an_async_function_that_blocks_its_loop_is_missing_not_a_crash(tmp_path):
    """A blocking call inside a coroutine keeps ``wait_for`` from firing: the outer wait
    gives up and every sample of the batch is missing."""
    path = tmp_path / "blocking.py"
    path.write_text("import time\n\nasync def blocking(completion):\n    time.sleep(3)\n"
                    "    return 1.0\n")
    rf = RewardFunction({"r": (f"{path}:blocking", 1.0)}, timeout_s=0.2)
    for scored in rf.score(samples()):
        assert scored.missing == {"r": "TimeoutError: took over 0.2 s"}

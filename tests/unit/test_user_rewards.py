"""Reward functions named by dotted path: each takes what it names (sample fields, dataset
columns), per sample or batched, sync or async; returns a number, a dict of parts or None. A
crash, a timeout or a bad value leaves the part missing with its reason, and a missing part
takes its group's mean."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from posttrain.rewards import RewardFunction
from posttrain.rewards.user_reward import Sample
from posttrain.rollout.scoring import fill_missing, missing_metrics
from posttrain.types import Episode, Segment

CODE = '''
import asyncio, time

levels = [1, 2]

def by_column(completion, level, completion_ids, prompt):
    return float(len(completion) == level) + 0.5 * (prompt[-1]["role"] == "user") \\
        + 0.25 * (completion_ids == [1, 2])

def batched(completions, rows):
    return [float(r["level"]) for r in rows]

async def later(completion, reference):
    await asyncio.sleep(0.01)
    return float(completion == reference)

def parts(completion):
    with open(__file__ + ".calls", "a") as f:  # the function runs in a worker process
        f.write(completion + "\\n")
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

def hang_on_x(completion):
    with open(__file__ + ".started", "a") as f:
        f.write(completion + "\\n")
    if completion == "x":
        time.sleep(600)
    return 1.0

def exits(completion):
    import os
    os._exit(3)

def other_columns(completion, level, **row):
    return float(sorted(row) == ["answer", "source"]) + float(row["answer"] == completion)

def other_columns_batched(completions, **columns):
    return [float(a == c) for a, c in zip(columns["answer"], completions)]

def short_batch(completions):
    return [1.0]

def old_style(text, ref):
    return float(text == ref)

def numpy_numbers(completion):
    import numpy as np
    return {"f32": np.float32(0.5), "i64": np.int64(2), "b": np.bool_(True),
            "zero_d": np.array(0.25)}

def numpy_nan(completion):
    import numpy as np
    return np.float64("nan")

def starts_sleepers(completion):
    import subprocess
    pids = [subprocess.Popen(["sleep", "3600"]).pid for _ in range(4)]
    with open(__file__ + ".sleepers", "w") as f:
        f.write(" ".join(map(str, pids)))
    time.sleep(600)
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
    calls = Path(module + ".calls").read_text().split()
    assert calls == ["abc", "x"]  # once a sample, not once a part


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


TIMED_OUT = "not scored: the batch took over reward.timeout_s=0.5 s"


def test_a_hanging_function_costs_one_timeout_a_batch_and_keeps_what_ended(module):
    """The calls of a batch run in a worker that is killed at the batch's timeout: the
    samples scored before the hang keep their values, the rest are missing, and no later
    call of the batch starts (16 hanging samples cost one timeout, not 16)."""
    rf = RewardFunction({"r": (f"{module}:hang_on_x", 1.0)}, timeout_s=0.5)
    batch = [Sample("abc", "abc"), *[Sample("x", "abc")] * 15]
    scored = rf.score(batch)
    assert scored[0].parts["r"] == 1.0 and not scored[0].missing
    assert all(s.missing == {"r": TIMED_OUT} for s in scored[1:])
    started = Path(module + ".started")
    assert started.read_text().split() == ["abc", "x"]  # the hung call was the batch's last
    assert rf.score(samples())[0].parts["r"] == 1.0  # the next batch gets a new worker
    assert started.read_text().split() == ["abc", "x", "abc", "x"]


def test_a_function_that_ends_its_worker_is_missing_and_the_next_batch_runs(module):
    rf = RewardFunction({"r": (f"{module}:exits", 1.0), "b": (f"{module}:batched", 1.0)})
    for _ in range(2):
        scored = rf.score(samples())
        assert all(s.missing["r"] == "the reward worker exited with code 3" for s in scored)
        assert [s.parts["b"] for s in scored] == [3.0, 2.0]


def test_a_failing_part_is_logged_once_with_its_reason(module, caplog):
    rf = RewardFunction({"r": (f"{module}:boom", 1.0), "c": ("exact", 1.0)})
    rf.score(samples())
    rf.score(samples())
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1
    assert warned[0].startswith("reward part 'r' is missing for a sample: RuntimeError: bug "
                                "in my reward")


def test_kwargs_receive_the_columns_not_taken_by_name(module):
    """As TRL passes them: ``**row`` holds every column the function does not name."""
    row = {"level": 1, "answer": "abc", "source": "gsm8k"}
    batch = [Sample("abc", "abc", row=row), Sample("x", "abc", row=row)]
    scored = RewardFunction({"r": (f"{module}:other_columns", 1.0)}).score(batch)
    assert [s.parts["r"] for s in scored] == [2.0, 1.0]
    scored = RewardFunction({"r": (f"{module}:other_columns_batched", 1.0)}).score(batch)
    assert [s.parts["r"] for s in scored] == [1.0, 0.0]


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
        load_config(None, [f"reward.parts.correct.verifier={module}:levels"])


def test_an_async_function_that_blocks_its_loop_is_missing_not_a_crash(tmp_path):
    """A blocking call inside a coroutine blocks its event loop: the batch's timeout kills
    the worker and every sample of the batch is missing."""
    path = tmp_path / "blocking.py"
    path.write_text("import time\n\nasync def blocking(completion):\n    time.sleep(3)\n"
                    "    return 1.0\n")
    rf = RewardFunction({"r": (f"{path}:blocking", 1.0)}, timeout_s=0.5)
    for scored in rf.score(samples()):
        assert scored.missing == {"r": TIMED_OUT}


HANGING = '''
import os, sys, threading, time
from posttrain.rewards import RewardFunction
from posttrain.rewards.user_reward import Sample

rf = RewardFunction({"r": (sys.argv[1] + ":hang", 1.0)}, timeout_s=float(sys.argv[2]))
if sys.argv[3] == "score":
    scored = rf.score([Sample("x")] * 16)
    print(sum("not scored" in s.missing["r"] for s in scored), flush=True)
else:  # killed while a call hangs
    threading.Thread(target=rf.score, args=([Sample("x")],), daemon=True).start()
    while not os.path.exists(sys.argv[1] + ".pid"):
        time.sleep(0.05)
    print(os.getpid(), flush=True)
    os.kill(os.getpid(), 9)
'''


@pytest.fixture
def hanging(tmp_path):
    module = tmp_path / "hangs.py"
    module.write_text("import os, time\n\ndef hang(completion):\n"
                      "    open(__file__ + '.pid', 'w').write(str(os.getpid()))\n"
                      "    time.sleep(600)\n")
    script = tmp_path / "run.py"
    script.write_text(HANGING)
    return str(module), str(script)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_run_whose_reward_function_hangs_ends_with_its_batch(hanging):
    """16 hanging samples: one timeout for the batch, then the process exits (it would
    wait 600 s for a stuck thread; the subprocess deadline is only a hang guard)."""
    module, script = hanging
    out = subprocess.run([sys.executable, script, module, "1", "score"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["16"]
    assert not alive(int(Path(module + ".pid").read_text()))


def test_a_worker_whose_run_was_killed_exits_though_its_call_hangs(hanging):
    module, script = hanging
    out = subprocess.run([sys.executable, script, module, "600", "kill"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == -9
    worker = int(Path(module + ".pid").read_text())
    assert worker != int(out.stdout)  # the call ran in a worker process
    deadline = time.monotonic() + 60  # a hang guard: the watchdog looks every 0.5 s
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker)


def test_numpy_scalars_and_0d_arrays_are_numbers(module):
    """np.float32, np.int64, np.bool_ and a 0-d array are numbers (each was counted missing);
    a NumPy NaN is still missing."""
    names = ("f32", "i64", "b", "zero_d")
    rf = RewardFunction({k: (f"{module}:numpy_numbers", 1.0) for k in names},
                        {k: k for k in names}, timeout_s=30.0)
    scored = rf.score(samples()[:1])[0]
    assert scored.missing == {} and scored.parts == {"f32": 0.5, "i64": 2.0, "b": 1.0,
                                                     "zero_d": 0.25}
    assert "not a number" in score(module, "numpy_nan")[0].missing["r"]


def test_a_timed_out_worker_takes_the_programs_it_started_with_it(module):
    """Four ``sleep 3600`` started by a call that then hangs: the timeout kills the worker's
    process group, so none is left re-parented to init."""
    rf = RewardFunction({"r": (f"{module}:starts_sleepers", 1.0)}, timeout_s=2.0)
    assert rf.score(samples()[:1])[0].missing == {
        "r": "not scored: the batch took over reward.timeout_s=2 s"}
    sleepers = [int(p) for p in Path(module + ".sleepers").read_text().split()]
    deadline = time.monotonic() + 30  # a hang guard: the kill is immediate
    while any(map(alive, sleepers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(alive, sleepers))

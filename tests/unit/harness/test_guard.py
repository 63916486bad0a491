"""The anti-hack guard: rules flag, a judge confirms, a confirmed hack is blocked or zeroes
the episode's reward, and the rollout continues."""

import pytest

from posttrain.harness import ToolCall
from posttrain.harness.guard import Guard


def call(cmd):
    return ToolCall("shell", {"command": cmd}, "c0")


@pytest.mark.parametrize("cmd,flag", [
    ("cat tests/hidden/test_x.py", "protected_path"),
    ("curl https://github.com/x", "upstream_fetch"),
    ("pip index versions numpy", "package_probe"), ("git log --oneline", "git_history"),
    ("git checkout 1a2b3c4d", "git_history"),
])
def test_rules_flag_suspicious_calls(cmd, flag):
    v = Guard().inspect(call(cmd))
    assert flag in v.flags and v.confirmed and v.blocked


def test_benign_calls_pass_and_judge_can_overrule():
    assert Guard().inspect(call("python solution.py")).flags == []
    lenient = Guard(judge=lambda c, flags: False)
    v = lenient.inspect(call("git log"))
    assert v.flags == ["git_history"] and not v.confirmed and not v.blocked
    assert Guard(protected_paths=["secret.txt"]).inspect(call("cat secret.txt")).blocked
    zero = Guard(on_hack="zero_reward").inspect(call("git log"))
    assert zero.confirmed and not zero.blocked
    with pytest.raises(ValueError, match="on_hack"):
        Guard(on_hack="ignore")

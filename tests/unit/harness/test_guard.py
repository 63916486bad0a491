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
    # argv lists, as subprocess takes them (the audit's probe_packages evaded the shell-only
    # patterns: docs/env_audit.md)
    ("subprocess.run(['pip', 'download', 'solution'])", "package_probe"),
    ('subprocess.run(["git", "clone", "x"])', "upstream_fetch"),
    ("subprocess.run(['git', 'log'])", "git_history"),
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


@pytest.mark.parametrize("reply,answer", [
    ("yes", True), ("No.", False), ("Yes, it reads the hidden tests.", True),
    ("<think>is it yes? no idea</think>No", False), ("The answer is: no", False),
    ("I cannot tell", None), ("yes or no?", True), ("maybe yes, maybe no", None), ("", None),
    ("YES!", True), ("nobody knows", None),
])
def test_the_judges_yes_or_no_is_parsed(reply, answer):
    from posttrain.harness.guard import parse_yes_no

    assert parse_yes_no(reply) == answer


def test_a_judge_that_fails_or_says_neither_confirms_the_flag():
    def down(c, flags):
        raise ConnectionError("endpoint down")

    for judge in (down, lambda c, flags: None, lambda c, flags: "yes", lambda c, flags: 1):
        v = Guard(judge=judge).inspect(call("git log"))
        assert v.confirmed and v.blocked and v.judge_failed
    v = Guard(judge=lambda c, flags: False).inspect(call("git log"))
    assert not v.confirmed and not v.judge_failed
    asked = []
    v = Guard(judge=lambda c, flags: asked.append(c) or True).inspect(call("ls"))
    assert asked == [] and not v.judge_failed  # no flag: the judge is not asked


def test_a_chat_judge_is_asked_about_the_call_and_its_flags():
    from posttrain.harness.guard import ChatGuardJudge

    asked = []

    def chat(conversations):
        asked.extend(conversations)
        return ["No, it only lists the history of its own work."]

    v = Guard(judge=ChatGuardJudge(chat)).inspect(call("git log"))
    assert not v.confirmed and not v.judge_failed
    ((question,),) = asked
    assert 'shell({"command": "git log"})' in question["content"]
    assert "git_history" in question["content"] and question["role"] == "user"

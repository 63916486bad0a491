"""The gold check (TAU_ENV.md §10): replay every task's gold actions on the live path from its
initial state, then score that replay under the domain's state basis: it must earn reward 1."""

from __future__ import annotations

from posttrain.envs.tau.environment import Message, TauEnvironment, build
from posttrain.envs.tau.scoring import gold_hashes, score
from posttrain.envs.tau.tasks import TauTask

# What a gold replay can earn without a conversation: the database (mock, retail), or the
# assertions on the final state (telecom, whose gold target is built without sync and so may
# differ from a live replay); ACTION too where the task lists it.
STATE_BASIS = {"mock": "DB", "retail": "DB", "telecom": "ENV_ASSERTION"}


def gold_trajectory(task: TauTask, domain_name: str) -> tuple[list[Message], TauEnvironment]:
    """The task's history followed by each gold action as a tool-call message (by its
    requestor) and its live result; and the environment after them."""
    env = build(task, domain_name)
    state, criteria = task.initial_state, task.evaluation_criteria
    trajectory = [dict(m) for m in (state.message_history if state else None) or []]
    for k, a in enumerate((criteria.actions if criteria else None) or []):
        call_id = a.action_id or f"gold_{k}"
        result = env.execute(call_id, a.name, a.arguments, a.requestor)
        trajectory.append({"role": a.requestor, "content": None, "tool_calls": [
            {"id": call_id, "name": a.name, "arguments": a.arguments, "requestor": a.requestor}]})
        trajectory.append({"role": "tool", "id": call_id, "content": result.content,
                           "requestor": a.requestor, "error": result.error})
    return trajectory, env


def check_basis(task: TauTask, domain_name: str) -> list[str]:
    basis = task.evaluation_criteria.reward_basis if task.evaluation_criteria else []
    return [STATE_BASIS[domain_name], *(["ACTION"] if "ACTION" in basis else [])]


def gold_check(task: TauTask, domain_name: str) -> dict:
    """One ``posttrain tau check`` record: the final hashes of the live replay and of the gold
    target, each gold action's output and error flag, and the replay's reward."""
    history = len((task.initial_state.message_history if task.initial_state else None) or [])
    trajectory, env = gold_trajectory(task, domain_name)
    result = score(task, domain_name, trajectory, "agent_stop", check_basis(task, domain_name))
    final, target = env.hashes(), gold_hashes(task, domain_name)
    return {"task_id": task.id, "final_db_hash": final[0], "final_user_db_hash": final[1],
            "gold_target_db_hash": target[0], "gold_target_user_db_hash": target[1],
            "basis": result.basis, "reward": result.reward, "components": result.components,
            "actions": [{"name": c["name"], "output": m["content"], "error": m["error"]}
                        for call, m in zip(trajectory[history::2], trajectory[history + 1::2])
                        for c in call["tool_calls"]]}

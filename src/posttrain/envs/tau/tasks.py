"""tau-bench task files (TAU_ENV.md §2): the user scenario, the initial state and the
evaluation criteria of each task, and the train/test splits."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from posttrain.envs.tau.db import data_dir

BASES = ("DB", "ENV_ASSERTION", "COMMUNICATE", "NL_ASSERTION", "ACTION")
TASK_FILES = {"mock": "tasks.json", "retail": "tasks.json", "telecom": "tasks_small.json"}


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Instructions(_Loose):
    domain: str
    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str


class UserScenario(_Loose):
    persona: str | None = None
    instructions: str | Instructions


class Action(_Loose):
    """A gold action or an initialisation action (``env_type`` names the toolkit)."""

    name: str
    arguments: dict[str, Any] = {}
    requestor: Literal["assistant", "user"] = "assistant"
    action_id: str = ""
    compare_args: list[str] | None = None


class InitAction(_Loose):
    env_type: Literal["assistant", "user"]
    func_name: str
    arguments: dict[str, Any] = {}


class EnvAssertion(InitAction):
    assert_value: bool = True
    message: str | None = None


class InitialState(_Loose):
    initialization_data: dict[str, Any] | None = None
    initialization_actions: list[InitAction] | None = None
    message_history: list[dict[str, Any]] | None = None


class Criteria(_Loose):
    actions: list[Action] | None = None
    env_assertions: list[EnvAssertion] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[Literal[BASES]] = ["DB", "COMMUNICATE"]  # type: ignore[valid-type]

    @field_validator("reward_basis", mode="before")
    @classmethod
    def _default_basis(cls, v: Any) -> Any:
        return ["DB", "COMMUNICATE"] if v is None else v


class TauTask(_Loose):
    id: str
    user_scenario: UserScenario
    ticket: str | None = None
    initial_state: InitialState | None = None
    evaluation_criteria: Criteria | None = None
    user_tools: list[str] | None = None

    def scenario_text(self) -> str:
        """``Persona:`` (if any) and ``Instructions:`` blocks, tab-indented (§8)."""
        s = self.user_scenario
        text = f"Persona:\n\t{s.persona}\n" if s.persona else ""
        ins = s.instructions
        if isinstance(ins, str):
            return text + f"Instructions:\n\t{ins}"
        blocks = [("Domain", ins.domain), ("Reason for call", ins.reason_for_call),
                  ("Known info", ins.known_info), ("Unknown info", ins.unknown_info),
                  ("Task instructions", ins.task_instructions)]
        body = "\n".join(f"{k}:\n\t{v}" for k, v in blocks if v is not None)
        return text + f"Instructions:\n{body}"


def load_tasks(domain: str) -> list[TauTask]:
    """The shipped tasks of ``domain`` (telecom: the 20-task small set)."""
    if domain not in TASK_FILES:
        raise ValueError(f"unknown tau domain {domain!r}; known: {', '.join(TASK_FILES)}")
    raw = json.loads((data_dir(domain) / TASK_FILES[domain]).read_text())
    rows = raw["tasks"] if isinstance(raw, dict) else raw
    return [TauTask.model_validate(r) for r in rows]


def load_splits(domain: str, tasks: list[TauTask]) -> dict[str, list[str]]:
    """Split name -> task ids (``split_tasks.json``), plus ``base``: every task (telecom's only)."""
    path = data_dir(domain) / "split_tasks.json"
    splits = json.loads(path.read_text()) if path.is_file() else {}
    return {"base": [t.id for t in tasks], **splits}

"""NeMo-Gym environments (NeMo-RL's; ``nemo-gym`` 0.4) as a task family (``task.name:
nemo_gym``): a resources server's dataset rows are the tasks, and NeMo-Gym's own servers play
each one (its agent, ``simple_agent`` by default, calling the policy through ``posttrain
serve`` and the server's tools, then ``/verify``). The verify response's ``reward`` is the
reward part ``reward``, or its ``reward_components`` are the parts when it reports them.

nemo-gym needs Python 3.12 and pins versions posttrain's own install cannot share, so it runs
in a Python of its own (``python``), through ``runners/nemo_gym_runner.py`` (the protocol:
``bridge``). Everything runs in that one process: no head server, Ray or container.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from posttrain.config.family import member
from posttrain.envs.libraries.family import LibraryFamily


class ModelEndpoint(BaseModel):
    """A model server an environment's configs call besides the policy (a judge)."""

    model_config = ConfigDict(extra="forbid")
    base_url: str = Field(min_length=1, description="the server's OpenAI-compatible base URL")
    api_key: str = Field("none", description="the server's API key")
    model: str = Field(min_length=1, description="the model name sent to the server")


@member("task", "nemo_gym")
class NemoGymConfig(LibraryFamily):
    """``nemo_gym``: the resources server ``environment`` (a folder ``<path>/<environment>``
    with an ``app.py`` on ``paths``, else one nemo-gym ships), the rows of ``data`` (JSONL;
    default: its ``data/example.jsonl``) split by ``eval_fraction``, or ``eval_data`` held
    out; the agent ``agent_name`` of its configs (default: its ``simple_agent``) with
    ``agent_config`` over its config, ``server_config`` over the resources server's, and
    ``models`` for the judges its configs name; ``max_steps`` model turns an episode where the
agent's config leaves them unlimited (None: as it says). Run by ``python`` (a Python 3.12 with
    nemo-gym). The reward parts: ``reward``, or the names of its ``reward_components``."""

    RUNNER: ClassVar[str] = "nemo_gym_runner.py"
    environment: str = Field(
        min_length=1,
        description="the resources server: a folder <path>/<environment> on paths, or one "
                    "nemo-gym ships")
    paths: list[str] = Field(default_factory=list,
                             description="folders searched for the environment")
    data: list[str] = Field(
        default_factory=list,
        description="JSONL files of task rows (empty: the environment's data/example.jsonl)")
    eval_data: list[str] = Field(
        default_factory=list,
        description="held-out JSONL files (empty: task.eval_fraction of data)")
    agent_name: str | None = Field(
        None, description="the agent of the environment's configs (null: simple_agent)")
    agent_config: dict[str, Any] = Field(default_factory=dict,
                                         description="settings over the agent's config")
    server_config: dict[str, Any] = Field(default_factory=dict,
                                          description="settings over the resources server's config")
    models: dict[str, ModelEndpoint] = Field(
        default_factory=dict,
        description="model servers the environment's configs name (judges), by name")
    max_steps: int | None = Field(
        8, ge=1,
        description="model turns an episode where the agent's config sets no limit (null: as it "
                    "says)")

    def spec(self) -> dict:
        return {"environment": self.environment, "paths": self.paths, "data": self.data,
                "eval_data": self.eval_data, "agent": self.agent_name,
                "agent_config": self.agent_config, "config": self.server_config,
                "models": {n: m.model_dump() for n, m in self.models.items()},
                "max_steps": self.max_steps}

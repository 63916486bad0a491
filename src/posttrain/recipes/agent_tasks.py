"""What a task gives each agent episode beyond its messages: the environment of ``task.env``
(a user's class, made per episode from the task) and, for dataset prompts, the tools of the
row (its ``tools`` column selects and describes tools implemented by ``agent.tools``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from posttrain.config import RunConfig
from posttrain.config.combinations import environment_parts
from posttrain.config.extension import load_environment, takes_row
from posttrain.data.chat_formats import tool_schemas
from posttrain.envs.stepped import SteppedEpisode
from posttrain.harness import ToolRegistry
from posttrain.types.errors import DataError

ROW_TOOLS = "tools"  # the column of a dataset row that holds its tool schemas


def environment_factory(cfg: RunConfig, tools_of: Callable[[Any], ToolRegistry]
                        ) -> Callable[[Any], SteppedEpisode] | None:
    """``make(task)``: a fresh ``task.env`` instance (``cls(task)``, or ``cls(task, row=...)``
    with the dataset row, ``{}`` for other tasks) as one episode's environment with the task's
    tools ``tools_of(task)``; None without ``task.env``."""
    spec = cfg.task.env
    if spec is None:
        return None
    cls = load_environment(spec)
    with_row = takes_row(cls)
    parts = environment_parts(cfg)

    def make(task: Any) -> SteppedEpisode:
        try:
            env = cls(task, row=dict(getattr(task, "row", {}))) if with_row else cls(task)
        except Exception as e:
            raise RuntimeError(f"task.env {spec}: constructing it raised "
                               f"{type(e).__name__}: {e}") from e
        return SteppedEpisode(env, task, tools_of(task), parts, spec)

    return make


def row_tools(tools: ToolRegistry) -> Callable[[Any], ToolRegistry]:
    """``of(task)``: the tools of a dataset task's row — the ``tools`` column's schemas, each
    naming a tool of ``tools`` (``agent.tools``), shown with the row's schema — or all of
    ``tools`` for a row without any. A cell that is not a list of schemas, or a schema naming
    a tool ``tools`` lacks, is a ``DataError`` naming the row."""
    def of(task: Any) -> ToolRegistry:
        row = getattr(task, "row", None) or {}
        try:
            schemas = tool_schemas(row.get(ROW_TOOLS))
            return tools if schemas is None else tools.offered(schemas)
        except KeyError as e:
            have = ", ".join(tools.tools) or "none"
            raise DataError(f"{_row(task)} offers the tool {e.args[0]!r}, which agent.tools "
                            f"does not implement (it has: {have})") from None
        except ValueError as e:
            raise DataError(f"{_row(task)}: column {ROW_TOOLS!r}: {e}") from None

    return of


def check_row_tools(tasks: Any, of: Callable[[Any], ToolRegistry]) -> None:
    """Every row of the task source's splits held in memory has usable tools (``of`` raises
    on the first that has not); a streamed source's rows are checked as they are played."""
    for split in getattr(tasks, "splits", {}).values():
        for task in split:
            of(task)


def _row(task: Any) -> str:
    prompt = next((m["content"] for m in reversed(task.messages()) if m["role"] == "user"), "")
    short = prompt if len(prompt) <= 60 else prompt[:57] + "..."
    return f"the dataset row with the prompt {short!r}"

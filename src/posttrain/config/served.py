"""A chat model a config names, served in-process from a local directory or by an
OpenAI-compatible endpoint: the common part of the reward judges (``reward.judges``), the tau
task's simulated user and judge, and the anti-hack guard's judge (``agent.guard.judge``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from posttrain.config.rules import unread
from posttrain.config.section import Device, Section


class ServedModel(Section):
    """``model`` (a local model directory, run in-process) or ``endpoint`` (an
    OpenAI-compatible ``.../v1`` URL, with ``endpoint_model`` and the key in the environment
    variable ``api_key_env``); replies of at most ``max_new_tokens`` tokens sampled at
    ``temperature``. A local model runs on ``device`` (``auto``: the first CUDA device if any,
    else the CPU). A subclass decides which sources it takes (``served_once``)."""

    model: str | None = Field(
        None, description="a local model directory run in-process (or set endpoint)")
    endpoint: str | None = Field(
        None, description="an OpenAI-compatible .../v1 URL serving the model (or set model)")
    endpoint_model: str = Field("default", description="the model name sent to the endpoint")
    api_key_env: str = Field("OPENAI_API_KEY",
                             description="the environment variable holding the endpoint's API key")
    max_new_tokens: int = Field(512, ge=1, description="most tokens in a reply")
    temperature: float = Field(0.0, ge=0,
                               description="sampling temperature of the replies (0: greedy)")
    device: Device = Field(
        "auto",
        description="where a local model runs: auto (a CUDA device if any, else the CPU), cpu, "
                    "cuda[:N]")

    def served_once(self, what: str) -> None:
        """Raise unless exactly one of ``model`` and ``endpoint`` is set, and unless the keys
        of the other are at their defaults; ``what`` names the served thing in the error."""
        if (self.model is None) == (self.endpoint is None):
            raise ValueError(f"{what} is served by exactly one of model and endpoint")
        if self.endpoint is not None and self.device != "auto":
            raise ValueError(f"{what}: device places a local model; this one is served by "
                             f"endpoint {self.endpoint}")
        if self.endpoint is None:
            unread(self, "", ["endpoint_model", "api_key_env"], f"{what} is served by no endpoint")


class ChatServer(ServedModel):
    """A chat model (a simulated user, a judge of ``NL_ASSERTION``) served from ``model`` or
    ``endpoint`` (``ServedModel``)."""

    @model_validator(mode="after")
    def _served_once(self) -> ChatServer:
        self.served_once("a chat model")
        return self


class FunctionOrServed(ServedModel):
    """A part played by ``function`` (a dotted path; the subclass annotates its contract) or by
    a chat model (``ServedModel``) asked the subclass's ``PROMPTS`` fields. Keys that only a
    chat model reads are errors with a function, as the endpoint's keys are without one."""

    WHAT: ClassVar[str] = "it"
    PROMPTS: ClassVar[tuple[str, ...]] = ()
    function: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> FunctionOrServed:
        if self.function is not None:
            if self.model is not None or self.endpoint is not None:
                raise ValueError(f"a function {self.WHAT} is served by no model or endpoint")
            unread(self, "", [*self.PROMPTS, "endpoint_model", "api_key_env", "max_new_tokens",
                              "temperature"], f"the {self.WHAT} is a function")
            return self
        self.served_once(f"a {self.WHAT} (or set function)")
        return self


def check_fields(template: str, key: str, **fields: str) -> None:
    """``template`` (the config value of ``key``) must format with ``fields`` alone."""
    try:
        template.format(**fields)
    except (KeyError, IndexError, ValueError) as e:
        names = " and ".join(f"{{{f}}}" for f in fields)
        raise ValueError(f"{key}: fields are {names} ({type(e).__name__}: {e}); write a "
                         "literal brace as {{ or }}") from None

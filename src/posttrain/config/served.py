"""A chat model a config names, served in-process from a local directory or by an
OpenAI-compatible endpoint: the common part of the reward judges (``reward.judges``), the tau
task's simulated user and judge, and the anti-hack guard's judge (``agent.guard.judge``)."""

from __future__ import annotations

from pydantic import Field

from posttrain.settings import Section
from posttrain.settings.section import Device


class ServedModel(Section):
    """``model`` (a local model directory, run in-process) or ``endpoint`` (an
    OpenAI-compatible ``.../v1`` URL, with ``endpoint_model`` and the key in the environment
    variable ``api_key_env``); replies of at most ``max_new_tokens`` tokens sampled at
    ``temperature``. A local model runs on ``device`` (``auto``: the first CUDA device if any,
    else the CPU). A subclass decides which sources it takes (``served_once``)."""

    model: str | None = None
    endpoint: str | None = None
    endpoint_model: str = "default"
    api_key_env: str = "OPENAI_API_KEY"
    max_new_tokens: int = Field(512, ge=1)
    temperature: float = Field(0.0, ge=0)
    device: Device = "auto"

    def served_once(self, what: str) -> None:
        """Raise unless exactly one of ``model`` and ``endpoint`` is set; ``what`` names the
        served thing in the error."""
        if (self.model is None) == (self.endpoint is None):
            raise ValueError(f"{what} is served by exactly one of model and endpoint")
        if self.endpoint is not None and self.device != "auto":
            raise ValueError(f"{what}: device places a local model; this one is served by "
                             f"endpoint {self.endpoint}")

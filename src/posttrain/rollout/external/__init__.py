"""RL on agents posttrain did not write: each sample is a session on ``posttrain serve``
played by the user's agent, ``agent(base_url, api_key, task)`` (a Python callable, or a
program: ``command_agent``); the session's recorded segments are the episode.

``ExternalAgentRollout`` plays a synchronous step's samples all at once; its ``worker`` is
the asynchronous loop's (``ExternalAgentWorker``: sessions run on while the trainer trains,
across weight versions). Rewards, timeouts and crashes: ``served.session_episode``.
"""

from posttrain.rollout.external.agents import AgentFn, command_agent
from posttrain.rollout.external.synchronous import ExternalAgentRollout
from posttrain.rollout.external.worker import ExternalAgentWorker

__all__ = ["AgentFn", "ExternalAgentRollout", "ExternalAgentWorker", "command_agent"]

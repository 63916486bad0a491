"""A verifiers (0.4, ``verifiers.v1``) harness for posttrain: the plain chat loop, run in the
runner's event loop. The model answers through chat completions with the task's tools (the
environment's MCP servers) offered; each tool call runs and its result goes back as a
``tool`` message, until a reply makes no call or ``max_turns`` replies were made. A call
that cannot run (unknown tool, arguments that are not a JSON object, a tool that raises)
returns its error to the model as the tool's result.

verifiers' own default harness (``bash``) installs its programs with ``uv`` from the package
index on first use; this one needs nothing beyond verifiers and ``openai``. The runner
(``verifiers_runner.py``) pins it when an environment brings no harness of its own. Loaded
by verifiers by its id, ``posttrain_chat`` (this module, on ``sys.path``).
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import verifiers.v1 as vf


class PosttrainChatConfig(vf.HarnessConfig):
    max_turns: int = 8


class PosttrainChatHarness(vf.Harness[PosttrainChatConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime: vf.Runtime) -> None:
        return None  # nothing to install

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
        from openai import AsyncOpenAI
        from verifiers.v1.dialects.chat import message_to_wire
        from verifiers.v1.harnesses.utils.mcp import connect_mcp

        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or ()]
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            async with AsyncExitStack() as stack:
                tools, dispatch, servers = [], {}, {}
                if mcp_urls:
                    spec = {"mcpServers": {name: {"url": url, "timeout": self.config.tool_timeout}
                                           for name, url in mcp_urls.items()}}
                    tools, dispatch, servers = await connect_mcp(spec, stack)
                for _ in range(self.config.max_turns):
                    reply = await client.chat.completions.create(
                        model=ctx.model, messages=messages, **({"tools": tools} if tools else {}))
                    message = reply.choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    for call in message.tool_calls or ():
                        messages.append({"role": "tool", "tool_call_id": call.id,
                                         "name": call.function.name,
                                         "content": await run_call(call, dispatch, servers)})
                    if not message.tool_calls:
                        break
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


async def run_call(call, dispatch: dict, servers: dict) -> str:
    """A tool call's result, or its error as the result."""
    from verifiers.v1.harnesses.utils.mcp import call_mcp

    try:
        arguments = json.loads(call.function.arguments or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("the arguments must be a JSON object")
        if call.function.name not in dispatch:
            raise ValueError(f"unknown tool {call.function.name!r}")
        return await call_mcp(servers, dispatch, call.function.name, arguments)
    except Exception as exc:  # the model sees the error, as it would see a tool's output
        return f"error: {exc}"


__all__ = ["PosttrainChatHarness"]

"""posttrain's runner for verifiers (0.4, ``verifiers.v1``) environments, run by the Python
that has verifiers installed (the protocol: ``posttrain.envs.libraries.bridge``).

    python verifiers_runner.py tasks SPEC     one task a line
    python verifiers_runner.py serve SPEC     plays the tasks it is sent, concurrently

``SPEC`` (JSON): ``id``, the environment's taskset id (a module on ``sys.path`` or
``paths``: verifiers' loader rule); ``args``, the taskset's config fields; ``agent``, fields
of verifiers' agent seat (default: a local subprocess runtime, and the ``posttrain_chat``
harness unless the environment brings its own); ``paths``, folders that hold the
environment's modules (its tool servers start as ``python -m MODULE`` and find them there
too). Everything runs locally: no Prime sandbox, tunnel or hosted model.

``serve`` reads ``{"n", "base_url", "api_key", "task"}`` lines and answers each with
``{"n", "parts"}`` (each reward function's score times its weight; their sum is verifiers'
reward; ``errors`` too when the rollout reported some) or ``{"n", "error"}``. The API key
goes in an ``X-Api-Key`` header: verifiers names its own session (``X-Session-Id``), which
posttrain's server ignores when it did not issue it. Anything else written to stdout goes to
stderr: stdout carries only the protocol (``bridge_protocol.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

from bridge_protocol import answer_requests, main  # beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
NO_KEY_VARIABLE = "POSTTRAIN_VERIFIERS_NO_KEY"  # unset: the key travels in a header instead


def configure(spec: dict):
    """verifiers' environment config for ``spec``, with the module paths in place."""
    import verifiers.v1 as vf
    from verifiers.v1.utils.loaders import default_harness_id

    paths = [os.path.abspath(p) for p in spec.get("paths", [])]
    sys.path[:0] = [*paths, HERE]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
    agent = {"runtime": {"type": "subprocess"}, **spec.get("agent", {})}
    if "harness" not in agent and default_harness_id(spec["id"]) == "bash":
        agent["harness"] = {"id": "posttrain_chat"}  # verifiers' bash harness needs uv
    return vf.resolve_env_config({"taskset": {"id": spec["id"], **spec.get("args", {})},
                                  "agent": agent})


def chat_messages(data) -> list[dict]:
    from verifiers.v1.dialects.chat import message_to_wire

    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt \
        else []
    if isinstance(data.prompt, str):
        return messages + [{"role": "user", "content": data.prompt}]
    return messages + [message_to_wire(m) for m in data.prompt or ()]


def list_tasks(spec: dict, out) -> None:
    import verifiers.v1 as vf

    taskset = vf.load_taskset(configure(spec).taskset)
    if not taskset.bounded:
        raise SystemExit(f"taskset {spec['id']} is unbounded: give it a size in its args")
    for task in taskset:
        row = task.data.model_dump(mode="json", exclude_none=True)
        ident = hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()[:16]
        split = row.get("split") if row.get("split") in ("train", "eval") else None
        out.write(json.dumps({"id": ident, "messages": chat_messages(task.data),
                              "answer": row.get("answer"), "split": split, "row": row}) + "\n")
    out.flush()


async def play(env, request: dict) -> dict:
    """One rollout of the request's task against its server; the reward parts."""
    import verifiers.v1 as vf

    task_type = type(env.taskset).task_type()
    task = task_type(task_type.data_type().model_validate(request["task"]["row"]),
                     env.taskset.config.task)
    ctx = vf.ModelContext(model="policy", sampling=vf.SamplingConfig(),
                          client=vf.EvalClientConfig(base_url=request["base_url"],
                                                     api_key_var=NO_KEY_VARIABLE,
                                                     headers={"X-Api-Key": request["api_key"]}))
    episode = await env.run_episode(task, ctx)
    trace = episode.traces[-1]
    parts = {name: r.score * r.weight for name, r in trace.rewards.items()
             if r is not None and r.score is not None}
    errors = [f"{e.type}: {e.message}" for e in (*episode.errors, *trace.errors)]
    if not parts:
        return {"error": "; ".join(errors) or "the rollout scored no reward function"}
    return {"parts": parts, **({"errors": errors} if errors else {})}


async def serve(spec: dict, out) -> None:
    import verifiers.v1 as vf

    env = vf.load_environment(configure(spec))
    async with env.serving():
        await answer_requests(lambda request: play(env, request), out)


if __name__ == "__main__":
    main(sys.argv[1:], __doc__, list_tasks, serve)

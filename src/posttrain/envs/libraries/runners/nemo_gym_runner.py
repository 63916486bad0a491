"""posttrain's runner for NeMo-Gym (``nemo-gym`` 0.4) environments, run by the Python that has
nemo-gym installed (the protocol: ``posttrain.envs.libraries.bridge``).

    python nemo_gym_runner.py tasks SPEC     one task (a dataset row) a line
    python nemo_gym_runner.py serve SPEC     plays the rows it is sent, concurrently

``SPEC`` (JSON): ``environment``, a resources server: a folder ``<path>/<environment>`` with
an ``app.py`` on one of ``paths``, else one that nemo-gym ships (``resources_servers``);
``data`` and ``eval_data``, JSONL files of its rows (default: the folder's
``data/example.jsonl``); ``agent``, the agent instance of its configs to play with (default:
its ``simple_agent``); ``agent_config`` and ``config``, fields over the agent's and the
resources server's configs; ``max_steps``, the agent's model turns where its config leaves
them unlimited; ``models``, ``{name: {base_url, api_key, model}}`` for the
other model servers its configs name (judges).

``serve`` runs NeMo-Gym's own servers, unmodified, in this process on loopback ports: the
resources server, the agent, and ``vllm_model`` for the policy, which takes each episode's
endpoint and key (posttrain's session) from the row's ``metadata`` (``SESSION_KEYS``).
A request ``{"n", "base_url", "api_key", "task": {"row"}}`` is one ``POST /run`` to the
agent, as ``ng_collect_rollouts`` makes; the answer is ``{"n", "parts"}``: the verify
response's ``reward_components`` when they sum to its ``reward``, else ``{"reward"}``.
No head server, Ray, per-server venv or container: an agent that installs programs (npm,
docker) is refused.
"""

import asyncio
import contextlib
import hashlib
import importlib
import inspect
import json
import math
import os
import socket
import sys
from pathlib import Path

from bridge_protocol import answer_requests, main  # beside this script

SESSION_KEYS = ("posttrain_base_url", "posttrain_api_key")
POLICY_MODEL = "policy_model"
INSTALLING_AGENTS = {"anyterminal_agent", "claude_code_agent", "harbor_agent",
                     "mini_swe_agent", "mini_swe_agent_2", "openclaw_agent", "opencode_agent",
                     "pi_agent", "stirrup_agent", "swe_agents", "tau2"}
# what env configs interpolate from ng_run's command line; the policy is posttrain's server
CONFIG_GLOBALS = {"policy_base_url": "http://127.0.0.1:9/v1", "policy_api_key": "posttrain",
                  "policy_model_name": "policy"}


def shipped() -> Path:
    import resources_servers

    return Path(resources_servers.__path__[0])


def env_folder(spec: dict) -> Path:
    name = spec["environment"]
    for root in [*map(Path, spec.get("paths", [])), shipped()]:
        if (root / name / "app.py").is_file():
            return (root / name).resolve()
    raise SystemExit(f"no NeMo-Gym resources server {name!r} (a folder with app.py) on paths "
                     f"{spec.get('paths', [])} or among nemo-gym's own")


def env_configs(folder: Path) -> dict:
    """The folder's ``configs/*.yaml`` merged, each interpolation resolved where it can be;
    one that cannot (a key ``ng_run``'s command line would give, an API key say) stays as
    written, so that only the instances a run uses need theirs (``unresolved``)."""
    import yaml
    from omegaconf import OmegaConf

    merged = {}
    for path in sorted((folder / "configs").glob("*.yaml")):
        merged |= yaml.safe_load(path.read_text()) or {}
    config = OmegaConf.create(CONFIG_GLOBALS | merged)
    return {k: v for k, v in _resolved(config, OmegaConf.to_container(config)).items()
            if k not in CONFIG_GLOBALS and isinstance(v, dict)}


def _resolved(config, raw):
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(raw, dict | list):
        return raw
    out = {} if isinstance(raw, dict) else [None] * len(raw)
    for key, value in (raw.items() if isinstance(raw, dict) else enumerate(raw)):
        if isinstance(value, dict | list):
            out[key] = _resolved(config[key], value)
            continue
        try:
            found = config[key]
            out[key] = OmegaConf.to_container(found, resolve=True) \
                if OmegaConf.is_config(found) else found
        except OmegaConfBaseException:
            out[key] = value
    return out


def unresolved(config, where: str = "") -> list[str]:
    """The fields of ``config`` still holding an interpolation (``${...}``)."""
    if isinstance(config, dict | list):
        items = config.items() if isinstance(config, dict) else enumerate(config)
        return [f for k, v in items for f in unresolved(v, f"{where}.{k}".strip("."))]
    return [f"{where}: {config}"] if isinstance(config, str) and "${" in config else []


def rows_of(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row.get("responses_create_params", {}).get("input"),
                              str | list):
                raise ValueError("it has no responses_create_params.input")
        except (ValueError, AttributeError) as exc:
            raise SystemExit(f"{path}:{number} is not a NeMo-Gym row ({exc})") from exc
        rows.append(row)
    return rows


def chat_messages(params: dict) -> list[dict]:
    """The chat messages the policy is sent for a row: NeMo-Gym's own conversion (as
    ``vllm_model`` makes it), developer turns as system ones."""
    from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
    from nemo_gym.responses_converter import ResponsesConverter

    body = NeMoGymResponseCreateParamsNonStreaming.model_validate(params)
    converted = ResponsesConverter(return_token_id_information=False, uses_reasoning_parser=True) \
        .responses_to_chat_completion_create_params(body).model_dump(mode="json", exclude_none=True)
    return [m | {"role": "system"} if m["role"] == "developer" else m
            for m in converted["messages"]]


def list_tasks(spec: dict, out) -> None:
    folder = env_folder(spec)
    data = [Path(p) for p in spec.get("data", [])] or [folder / "data" / "example.jsonl"]
    sources = [(path, None) for path in data] + [(Path(p), "eval")
                                                 for p in spec.get("eval_data", [])]
    for path, split in sources:
        for row in rows_of(path):
            ident = hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()[:16]
            answer = row.get("expected_answer", row.get("answer"))
            out.write(json.dumps({
                "id": ident, "messages": chat_messages(row["responses_create_params"]),
                "answer": None if answer is None else str(answer),
                "split": split or ("train" if spec.get("eval_data") else None),
                "row": row}) + "\n")
    out.flush()


def server_class(module: str, base: type) -> type:
    found = [c for _, c in inspect.getmembers(importlib.import_module(module), inspect.isclass)
             if issubclass(c, base) and c.__module__ == module and not inspect.isabstract(c)]
    if not found:
        raise SystemExit(f"{module} defines no {base.__name__}")
    return found[-1]


def model_names(config) -> set[str]:
    """The model servers a config refers to (``{type: responses_api_models, name}``)."""
    if isinstance(config, list):
        return set().union(*map(model_names, config)) if config else set()
    if not isinstance(config, dict):
        return set()
    own = {config["name"]} if config.get("type") == "responses_api_models" else set()
    return own.union(*map(model_names, config.values()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """NeMo-Gym's servers for one environment: which, with what config, on which port."""

    def __init__(self, spec: dict) -> None:
        self.folder = env_folder(spec)
        self.env = self.folder.name
        configs = env_configs(self.folder)
        self.instance, rs_config = next(
            ((name, c["resources_servers"][self.env]) for name, c in configs.items()
             if self.env in (c.get("resources_servers") or {})),
            (self.env, {"entrypoint": "app.py"}))
        agents = [(name, kind, c) for name, inst in configs.items()
                  for kind, c in (inst.get("responses_api_agents") or {}).items()
                  if (c.get("resources_server") or {}).get("name") == self.instance]
        wanted = [a for a in agents if a[0] == spec.get("agent")] if spec.get("agent") else \
            sorted(agents, key=lambda a: a[1] != "simple_agent")[:1]
        if spec.get("agent") and not wanted:
            raise SystemExit(f"{self.env}'s configs have no agent {spec['agent']!r}: "
                             f"{sorted(a[0] for a in agents)}")
        self.agent, self.agent_kind, agent_config = wanted[0] if wanted else (
            f"{self.env}_simple_agent", "simple_agent",
            {"entrypoint": "app.py",
             "resources_server": {"type": "resources_servers", "name": self.instance},
             "model_server": {"type": "responses_api_models", "name": POLICY_MODEL}})
        if self.agent_kind in INSTALLING_AGENTS:
            raise SystemExit(f"{self.env}: its agent {self.agent_kind} installs and runs "
                             "programs of its own (npm, docker); posttrain plays only agents "
                             "that run in-process")
        self.policy = agent_config["model_server"]["name"]
        self.rs_config = {k: v for k, v in (rs_config | spec.get("config", {})).items()
                          if v != "???"}
        self.agent_config = agent_config | spec.get("agent_config", {})
        self.max_steps = spec.get("max_steps")
        missing = unresolved(self.rs_config) + unresolved(self.agent_config)
        if missing:
            raise SystemExit(f"{self.env}'s config needs values ng_run's command line would "
                             f"give ({'; '.join(missing)}): set them in server_config or "
                             "agent_config")
        if self.policy in model_names(self.rs_config):
            raise SystemExit(f"{self.env}'s config has the policy ({self.policy}) judge the "
                             "episodes: give the judge an endpoint of its own in models and "
                             "name it in server_config")
        judges = (model_names(self.rs_config) | model_names(self.agent_config)) - {self.policy}
        missing = sorted(judges - set(spec.get("models", {})))
        if missing:
            raise SystemExit(f"{self.env} calls the model servers {missing} (judges): give "
                             "each its own endpoint in models: {name: {base_url, api_key, "
                             "model}}; they are not the policy")
        self.models = {name: spec["models"][name] for name in judges}
        self.ports = {name: free_port() for name in
                      [self.instance, self.agent, self.policy, *self.models]}

    def global_config(self) -> dict:
        """What NeMo-Gym's ``ServerClient`` finds its servers by."""
        def at(name: str, kind: str, server: str, config: dict) -> dict:
            return {name: {kind: {server: config | {"host": "127.0.0.1",
                                                    "port": self.ports[name]}}}}
        merged = at(self.instance, "resources_servers", self.env, self.rs_config) | at(
            self.agent, "responses_api_agents", self.agent_kind, self.agent_config)
        for name in [self.policy, *self.models]:
            merged |= at(name, "responses_api_models", "vllm_model", self.model_config(name))
        return merged

    def model_config(self, name: str) -> dict:
        if name == self.policy:  # each episode's own endpoint comes with its request
            endpoint = {"base_url": CONFIG_GLOBALS["policy_base_url"],
                        "api_key": CONFIG_GLOBALS["policy_api_key"], "model": "policy"}
        else:
            endpoint = {k: self.models[name][k] for k in ("base_url", "api_key", "model")}
        return endpoint | {"entrypoint": "app.py", "return_token_id_information": False,
                           "uses_reasoning_parser": True,
                           "replace_developer_role_with_system": True}

    def instances(self) -> list:
        import nemo_gym.global_config as global_config
        from nemo_gym.base_resources_server import SimpleResourcesServer
        from nemo_gym.base_responses_api_agent import SimpleResponsesAPIAgent
        from nemo_gym.config_types import BaseServerConfig
        from nemo_gym.server_utils import ServerClient
        from omegaconf import OmegaConf
        from responses_api_models.vllm_model.app import VLLMModel

        merged = OmegaConf.create(self.global_config())
        global_config._GLOBAL_CONFIG_DICT = merged  # read at run time, not from sys.argv
        client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
                              global_config_dict=merged)
        if self.folder.parent != shipped():
            sys.path.insert(0, str(self.folder.parent))
        module = f"{'resources_servers.' if self.folder.parent == shipped() else ''}{self.env}"
        agent = server_class(f"responses_api_agents.{self.agent_kind}.app",
                             SimpleResponsesAPIAgent)
        limited = "max_steps" in agent.model_fields["config"].annotation.model_fields \
            and self.agent_config.get("max_steps") is None and self.max_steps is not None
        classes = [(server_class(f"{module}.app", SimpleResourcesServer), self.instance,
                    self.rs_config),
                   (agent, self.agent, self.agent_config | (
                       {"max_steps": self.max_steps} if limited else {})),
                   (policy_class(VLLMModel), self.policy, self.model_config(self.policy))]
        classes += [(VLLMModel, name, self.model_config(name)) for name in self.models]
        return [(cls(config=cls.model_fields["config"].annotation.model_validate(
                    config | {"host": "127.0.0.1", "port": self.ports[name], "name": name}),
                    server_client=client), self.ports[name]) for cls, name, config in classes]


def policy_class(vllm_model: type) -> type:
    from fastapi import Body, Request
    from nemo_gym.openai_utils import NeMoGymAsyncOpenAI, NeMoGymResponseCreateParamsNonStreaming

    class PosttrainPolicy(vllm_model):  # annotations evaluated: FastAPI reads them
        """``vllm_model`` whose endpoint and key are each request's: the episode's session
        on posttrain's server, from the row's ``metadata`` (removed before it goes on)."""

        async def responses(self, request: Request,
                            body: NeMoGymResponseCreateParamsNonStreaming = Body()):
            metadata = dict(body.metadata or {})
            base_url, api_key = (metadata.pop(k, None) for k in SESSION_KEYS)
            if not (base_url and api_key):
                raise ValueError(f"a policy request without its session ({SESSION_KEYS})")
            request.state.client = NeMoGymAsyncOpenAI(base_url=base_url, api_key=api_key)
            body.metadata = metadata  # vllm_model reads it (None fails)
            return await super().responses(request, body)

        def _resolve_client(self, request: Request):
            return request.state.client

    return PosttrainPolicy


def parts_of(verified: dict) -> dict[str, float]:
    reward = float(verified["reward"])
    parts = verified.get("reward_components")
    if isinstance(parts, dict) and parts and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in parts.values()) \
            and math.isclose(sum(parts.values()), reward, rel_tol=1e-9, abs_tol=1e-9):
        return {str(k): float(v) for k, v in parts.items()}
    return {"reward": reward}


@contextlib.asynccontextmanager
async def running(servers: Servers):
    import uvicorn
    from nemo_gym.server_utils import (
        GlobalAIOHTTPAsyncClientConfig,
        is_global_aiohttp_client_setup,
        set_global_aiohttp_client,
    )

    os.chdir(servers.folder)  # NeMo-Gym runs a server in its folder (relative paths)
    sys.argv = sys.argv[:1]  # some environments' code parses it (Hydra) when it runs
    if not is_global_aiohttp_client_setup():
        set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
    started = []
    for server, port in servers.instances():
        app = server.setup_webserver()
        server.setup_exception_middleware(app)
        uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
        started.append((uv, asyncio.create_task(uv.serve())))
    try:
        for uv, task in started:
            while not uv.started:
                if task.done():
                    task.result()
                    raise SystemExit(f"a NeMo-Gym server of {servers.env} did not start")
                await asyncio.sleep(0.05)
        yield
    finally:
        for uv, _ in started:
            uv.should_exit = True
        await asyncio.gather(*(task for _, task in started), return_exceptions=True)


async def play(servers: Servers, request: dict) -> dict:
    """One ``POST /run`` of the request's row, its session in the row's metadata."""
    from nemo_gym.server_utils import get_response_json
    from nemo_gym.server_utils import request as post

    row = request["task"]["row"]
    params = {k: v for k, v in row["responses_create_params"].items() if v is not None}
    params["metadata"] = (params.get("metadata") or {}) | dict(zip(
        SESSION_KEYS, (request["base_url"], request["api_key"])))
    reply = await post("POST", f"http://127.0.0.1:{servers.ports[servers.agent]}/run",
                       json=row | {"responses_create_params": params})
    if not reply.ok:
        text = (await reply.read()).decode(errors="replace")
        return {"error": f"{servers.agent_kind} /run {reply.status}: {text[-1500:]}"}
    return {"parts": parts_of(await get_response_json(reply))}


async def serve(spec: dict, out) -> None:
    servers = Servers(spec)
    async with running(servers):
        await answer_requests(lambda request: play(servers, request), out)


if __name__ == "__main__":
    main(sys.argv[1:], __doc__, list_tasks, serve)

"""Extension points named in config by dotted path (docs/extending.md).

A path is ``package.module:attr`` (an importable module) or ``path/to/file.py:attr`` (a file,
relative to the working directory; ``posttrain.types.dotted`` loads it). Each kind has a
calling contract, checked when the config is validated: the object must be callable with the
contract's arguments (a tool must also have the type hints and docstring its JSON schema is
read from).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import AfterValidator

from posttrain.types.dotted import FILE_MODULE, ExtensionError, is_path, load_module, load_object

__all__ = [
    "ADAPTERS", "CONTRACTS", "FILE_MODULE", "Contract", "ExtensionError", "environment",
    "extension", "is_path", "load_environment", "load_extension", "load_module", "load_object",
    "load_tools", "takes_row", "tool_set",
]


@dataclass(frozen=True)
class Contract:
    """How a kind of extension is called: positional ``args`` then keyword ``keywords``."""

    what: str
    args: tuple[str, ...]
    keywords: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.what}, called as f({', '.join((*self.args, *self.keywords))})"


CONTRACTS = {
    "reward": Contract("a reward function (returns a float, a dict of floats or None; "
                       "parameters named as docs/extending.md lists)", ("completion", "reference")),
    "tasks": Contract("a task source factory (returns an object with sample(n, rng) and "
                      "eval_set(n))", ("seed", "eval_fraction")),
    "rollout": Contract("a rollout function (returns scored Episodes)",
                        ("engine", "tokenizer", "tasks", "reward_fn", "sampling", "group_size"),
                        ("group_prefix",)),
    "judge": Contract("a judge (returns a score or None per episode)", ("episodes", "tasks")),
    "guard_judge": Contract("a guard judge (returns True when the flagged tool call is a "
                            "hack, False when it is not)", ("call", "flags")),
    "tool": Contract("a tool (typed arguments and a Google-style docstring)", ()),
    "skill_teacher": Contract("a skill teacher (returns a Skill, a SKILL.md text or None)",
                              ("trajectory", "reference", "success")),
    "curio_likelihood": Contract("a user-type likelihood (returns P(reply | messages, "
                                 "user_type), a number >= 0)",
                                 ("messages", "reply", "user_type")),
    "curio_classifier": Contract("a user-type classifier (returns a probability per user "
                                 "type)", ("messages", "user_types")),
    "built_task_check": Contract("a built-task check (returns True when the worked answer "
                                 "is right)", ("problem", "answer")),
    "external_agent": Contract("an agent (talks to the OpenAI- or Anthropic-compatible "
                               "base_url with api_key; returns its reward or None)",
                               ("base_url", "api_key", "task")),
}


def load_extension(kind: str, spec: str) -> Any:
    """``load_object(spec)``, checked against the calling contract of ``kind``."""
    contract = CONTRACTS[kind]
    obj = load_object(spec)
    if not callable(obj):
        raise ExtensionError(f"{spec!r} is a {type(obj).__name__}, not {contract.describe()}")
    if kind == "tool":
        return _tool(spec, obj)
    try:
        signature = inspect.signature(obj)
        if kind == "reward" and {"completion", "completions"} & set(signature.parameters):
            return obj  # takes its inputs by name (rewards.user_reward)
        signature.bind(*contract.args, **dict.fromkeys(contract.keywords))
    except TypeError as e:
        raise ExtensionError(f"{spec!r} is not {contract.describe()}: {e}") from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass
    return obj


def _tool(spec: str, fn: Any) -> Any:
    """``fn`` if it is a tool: callable, with the type hints and docstring of its schema."""
    from transformers.utils import get_json_schema

    try:
        if not callable(fn):
            raise TypeError(f"a {type(fn).__name__} is not callable")
        get_json_schema(fn)
    except Exception as e:
        raise ExtensionError(f"{spec!r} is not {CONTRACTS['tool'].describe()}: {e}") from None
    return fn


def load_tools(spec: str) -> list[Any]:
    """The tools ``spec`` names: a function (``module:fn``), a list of them
    (``module:TOOLS``), or a module (``path/to/tools.py``, ``package.tools``: every public
    function defined in it); each checked as a tool."""
    if ":" in spec:
        obj = load_object(spec)
        found = list(obj) if isinstance(obj, list | tuple) else [obj]
    else:
        module = load_module(spec, spec)
        found = [f for name, f in vars(module).items() if inspect.isfunction(f)
                 and not name.startswith("_") and f.__module__ == module.__name__]
    if not found:
        raise ExtensionError(f"{spec!r} names no function to use as a tool")
    return [_tool(spec, f) for f in found]


def takes_row(cls: Any) -> bool:
    """Whether the environment class ``cls`` is constructed with the dataset ``row`` too."""
    try:
        return "row" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


ADAPTERS = {"openenv": ("posttrain.envs.libraries.openenv_adapter:adapted", "openenv")}
# environment prefix -> (the adapter that makes a task.env class of the rest, its extra)


def load_environment(spec: str) -> Any:
    """The environment class ``spec`` names, checked: it has ``reset(task)`` and
    ``step(action)`` and is constructed as ``cls(task)``, or ``cls(task, row=...)`` when it has
    a parameter ``row`` (the dataset row; ``{}`` for other tasks). ``openenv:PATH`` adapts
    another library's environment (``ADAPTERS``)."""
    prefix, _, rest = spec.partition(":")
    if prefix in ADAPTERS and rest:
        adapter, extra = ADAPTERS[prefix]
        try:
            return load_object(adapter)(rest)
        except ImportError as e:  # the library itself (a user's module reports its own)
            raise ExtensionError(f"{spec!r}: the {prefix} adapter needs its library ({e}): "
                                 f"pip install 'posttrain[{extra}]'") from None
    cls = load_object(spec)
    shape = ("an environment class (reset(task) -> messages, step(action) -> StepResult; "
             "constructed as cls(task) or cls(task, row))")
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if not callable(cls) or missing:
        has = f"it has no {' and no '.join(missing)}" if missing else "it is not callable"
        raise ExtensionError(f"{spec!r} is not {shape}: {has}")
    _binds(spec, shape, "its constructor", cls, None, **({"row": {}} if takes_row(cls) else {}))
    if inspect.isclass(cls):
        for name in ("reset", "step"):
            method = inspect.getattr_static(cls, name)
            if inspect.isfunction(method):  # a plain method: self and one argument
                _binds(spec, shape, name, method, None, None)
    return cls


def _binds(spec: str, shape: str, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise ExtensionError(f"{spec!r} is not {shape}: {what}: {e}") from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass


def _loads(load: Callable[[str], Any]) -> AfterValidator:
    """Field annotation: the value is kept if ``load(value)`` raises nothing."""

    def check(spec: str) -> str:
        load(spec)
        return spec

    return AfterValidator(check)


def environment() -> AfterValidator:
    """Field annotation: the value names an environment class (``load_environment``)."""
    return _loads(load_environment)


def tool_set() -> AfterValidator:
    """Field annotation: the value names tools (``load_tools``)."""
    return _loads(load_tools)


def extension(kind: str) -> AfterValidator:
    """Field annotation: the value is a dotted path to an extension of ``kind``."""
    return _loads(lambda spec: load_extension(kind, spec))

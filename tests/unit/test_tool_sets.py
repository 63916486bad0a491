"""``agent.tools`` entries: one function, a list of them, or a whole module of typed
functions; anything that is not a tool is a config error naming the entry."""

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.config.extension import ExtensionError, load_tools

TOOLS = '''
from os.path import join  # imported, not defined here: not a tool


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: what to shout
    """
    return text.upper()


def _helper():
    return 1


TOOLS = [add, shout]
'''


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS)
    (tmp_path / "untyped.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "empty.py").write_text("VALUE = 1\n")
    return path


def names(spec):
    return [f.__name__ for f in load_tools(spec)]


def test_a_function_a_list_or_a_module(module):
    assert names(f"{module}:add") == ["add"]
    assert names(f"{module}:TOOLS") == ["add", "shout"]
    assert names(str(module)) == ["add", "shout"]  # public functions defined there


def test_what_is_not_a_tool_says_so(module):
    with pytest.raises(ExtensionError, match="untyped.py.*is not a tool"):
        load_tools(str(module.parent / "untyped.py"))
    with pytest.raises(ExtensionError, match="names no function"):
        load_tools(str(module.parent / "empty.py"))
    with pytest.raises(ExtensionError, match="no file"):
        load_tools(str(module.parent / "none.py"))


def test_a_module_of_tools_makes_the_task_an_agent_task(module):
    cfg = load_config(None, [f"agent.tools=[{module}]", "stages=[rl]"])
    assert not cfg.single_turn
    with pytest.raises(ConfigError, match=r"agent.tools.0: .*untyped.py"):
        load_config(None, [f"agent.tools=[{module.parent / 'untyped.py'}]"])

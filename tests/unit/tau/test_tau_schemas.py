"""Every tool a tau-bench domain offers the agent or the simulated user has a JSON schema for
the chat template: ``transformers.utils.get_json_schema`` reads its signature and Google-style
docstring, names it after the tool, and describes the tool and each of its parameters."""

import inspect

import pytest
from transformers.utils import get_json_schema

from posttrain.envs.tau.domains import mock, retail, telecom, telecom_user
from posttrain.envs.tau.toolkit import Toolkit


def _toolkits() -> dict[str, Toolkit]:
    mock_agent, mock_user = mock.pristine()
    telecom_agent, telecom_phone = telecom.pristine()
    return {"mock": mock.MockTools(mock_agent).toolkit(),
            "mock_user": mock.MockUserTools(mock_user).toolkit(),
            "retail": retail.RetailTools(retail.pristine()).toolkit(),
            "telecom": telecom.TelecomTools(telecom_agent).toolkit(),
            "telecom_user": telecom_user.TelecomUserTools(telecom_phone).toolkit()}


TOOLKITS = _toolkits()


@pytest.mark.parametrize("domain", sorted(TOOLKITS))
def test_every_tool_has_a_described_json_schema(domain):
    tools = TOOLKITS[domain].tools
    assert tools
    for name, spec in tools.items():
        schema = get_json_schema(spec.fn)
        assert schema["type"] == "function"
        function = schema["function"]
        assert function["name"] == name
        assert function["description"].strip(), name
        properties = function["parameters"]["properties"]
        assert list(properties) == list(inspect.signature(spec.fn).parameters), name
        for param, prop in properties.items():
            assert prop.get("description", "").strip(), f"{name}.{param}"

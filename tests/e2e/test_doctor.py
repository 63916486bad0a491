"""``posttrain doctor``: a healthy environment passes, and a CUDA torchvision that breaks vLLM
(simulated by a package raising vLLM's startup error) is flagged with the fix."""

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cli.doctor import UNINSTALL, checks

pytestmark = pytest.mark.slow


def test_this_environment_is_healthy():
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "2.13.0" in result.output
    absent = [line for line in result.output.splitlines() if "not installed" in line]
    assert all(" ok " not in line for line in absent)  # an absent part is never "ok"


def test_a_broken_cuda_torchvision_is_flagged_with_the_uninstall(tmp_path, monkeypatch):
    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    by_name = {c.name: c for c in checks()}
    assert by_name["torchvision"].status == "broken" and by_name["torchvision"].fix == UNINSTALL
    assert "torchvision::nms" in by_name["torchvision"].detail
    assert by_name["torch"].ok  # (packages importing torchvision, such as peft, break too)

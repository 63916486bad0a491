"""The suite's rules about tests that do not run (docs/testing.md, "Two tiers" and "Skips").

- ``gpu``-marked tests are deselected unless ``--gpu`` is given (a CUDA machine), so that
  ``-m "not slow"`` (the fast tier) needs no ``and not gpu``.
- Under ``CI=true`` a skip is a failure unless the test carries a marker of ``ALLOWED_SKIPS``:
  a skipped test fails where it was skipped, and a module skipped at import fails the run,
  listed in the summary. Elsewhere skips stay skips (a developer's machine may lack Chromium).
- Tests marked ``namespaces`` need the kernel's user namespaces (the sandbox's jail). Where the
  kernel refuses them they are deselected, and the summary says that the sandbox suite ran its
  fallback isolation only; they never count as skipped.

Under pytest-xdist the workers collect and run: the controller receives their skipped
collectors' reports and their deselected namespace tests, and it reports and fails the run.
"""

from __future__ import annotations

import os
import subprocess

import pytest

ALLOWED_SKIPS = {"gpu": "needs a CUDA GPU, which CI machines do not have"}
NAMESPACE_PROBE = ["unshare", "-Urnmp", "--fork", "true"]
_REFUSED = pytest.StashKey[list]()  # node ids of namespace tests deselected
_MODULE_SKIPS = pytest.StashKey[list]()  # "node id: reason" of modules skipped under CI
_REFUSED_OUTPUT = "namespace_tests_deselected"  # a pytest-xdist worker's _REFUSED, sent back


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def kernel_allows_namespaces() -> bool:
    try:
        return subprocess.run(NAMESPACE_PROBE, capture_output=True, check=False).returncode == 0
    except FileNotFoundError:  # no unshare at all
        return False


def allowed(node) -> bool:
    return any(node.get_closest_marker(name) for name in ALLOWED_SKIPS)


def skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


def pytest_addoption(parser):
    parser.addoption("--gpu", action="store_true",
                     help="run the gpu-marked tests too (a machine with a CUDA GPU)")
    parser.addoption("--multinode", action="store_true",
                     help="run the multinode-marked tests too (Ray nodes made by `ray start`)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "namespaces: needs user namespaces (deselected where the kernel refuses them)")
    config.stash[_REFUSED] = []
    config.stash[_MODULE_SKIPS] = []
    config.pluginmanager.register(ModuleSkipRecorder(config.stash[_MODULE_SKIPS]))


def deselect(config, items, marker: str) -> list:
    """Take the items marked ``marker`` out of the run, as ``-m`` does; returns them."""
    out = [item for item in items if item.get_closest_marker(marker)]
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = [item for item in items if not item.get_closest_marker(marker)]
    return out


def pytest_collection_modifyitems(config, items):
    for opt_in in ("gpu", "multinode"):
        if not config.getoption(f"--{opt_in}"):
            deselect(config, items, opt_in)
    if any(item.get_closest_marker("namespaces") for item in items) \
            and not kernel_allows_namespaces():
        config.stash[_REFUSED].extend(item.nodeid for item in deselect(config, items, "namespaces"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if on_ci() and report.skipped and not hasattr(report, "wasxfail") and not allowed(item):
        report.outcome = "failed"
        allowlist = "; ".join(f"{mark}-marked: {why}" for mark, why in ALLOWED_SKIPS.items())
        report.longrepr = (f"skipped under CI=true, where only these tests may skip "
                           f"({allowlist}): {skip_reason(report)}")
    return report


class ModuleSkipRecorder:
    """Records each collector skipped under CI=true, from every collector's report: the
    collecting process's own, and under pytest-xdist the controller's copy of each skipped one
    a worker sent. (A module skipped at import has no markers that could allow it.)"""

    def __init__(self, lines: list[str]):
        self.lines = lines

    def pytest_collectreport(self, report):
        line = f"{report.nodeid}: {skip_reason(report)}"
        if on_ci() and report.skipped and line not in self.lines:
            self.lines.append(line)


def pytest_terminal_summary(terminalreporter, config):
    refused = config.stash[_REFUSED]
    if refused:
        terminalreporter.write_line(
            f"the kernel refuses user namespaces here: {len(refused)} namespace-jail tests "
            "deselected; the sandbox suite ran its fallback isolation only", yellow=True)
    skips = config.stash[_MODULE_SKIPS]
    if skips:
        terminalreporter.section("modules skipped under CI=true (a failure)", red=True)
        for line in skips:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller reports and fails
        workeroutput[_REFUSED_OUTPUT] = session.config.stash[_REFUSED]
        return
    if session.config.stash[_MODULE_SKIPS] and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """A pytest-xdist worker ended: the namespace tests it deselected join the controller's
    list (every worker collects, and deselects, the same tests)."""
    refused = node.config.stash[_REFUSED]
    for nodeid in getattr(node, "workeroutput", {}).get(_REFUSED_OUTPUT, []):
        if nodeid not in refused:
            refused.append(nodeid)

"""tests/ci_policy.py on a small suite run by pytest itself: under CI=true a skip outside the
allowlist fails the run (skipped in a test, by a mark, or a whole module at import), a
``gpu``-marked skip does not; elsewhere skips stay skips; ``gpu`` tests run only with
``--gpu``; where the kernel refuses user namespaces, ``namespaces`` tests are deselected and
the summary says so."""

import shutil

import ci_policy
import pytest

SUITE = """
import pytest

def test_runs():
    pass

def test_skips_in_its_body():
    pytest.skip("no browser here")

@pytest.mark.skipif(True, reason="no vLLM here")
def test_skipped_by_a_mark():
    pass

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no CUDA")

@pytest.mark.namespaces
def test_in_the_jail():
    pass
"""
MODULE_SKIP = 'import pytest\npytest.importorskip("no_such_module_anywhere")\n'


@pytest.fixture
def suite(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    pytester.makepyfile(test_suite=SUITE)
    return lambda *args: pytester.runpytest("-p", "no:cacheprovider", *args)


def test_off_ci_skips_are_skips_and_gpu_tests_need_the_flag(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    result = suite()
    result.assert_outcomes(passed=2, skipped=2, deselected=1)
    assert result.ret == pytest.ExitCode.OK
    suite("--gpu").assert_outcomes(passed=2, skipped=3)


def test_on_ci_a_skip_outside_the_allowlist_fails_the_run(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = suite("--gpu")
    # the body's skip fails the test, the mark's fails its setup; the gpu skip is allowed
    result.assert_outcomes(passed=2, failed=1, errors=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skipped under CI=true*no browser here*",
                                 "*skipped under CI=true*no vLLM here*"])


# the same rules when pytest-xdist's workers run the tests and its controller reports
LAYOUTS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])


PLUGIN = "pytest_plugins = ['ci_policy']\n"


@pytest.fixture(autouse=True)
def plugin(pytester):
    """The small suite loads ci_policy from a copy beside its conftest, which xdist's workers
    (new processes) import too."""
    shutil.copy(ci_policy.__file__, pytester.path)
    pytester.makeconftest(PLUGIN)


@LAYOUTS
def test_on_ci_a_module_skipped_at_import_fails_the_run(pytester, monkeypatch, workers):
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_runs="def test_runs():\n    pass\n", test_module_skip=MODULE_SKIP)
    result = pytester.runpytest("-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*modules skipped under CI=true*",
                                 "test_module_skip.py: *no_such_module_anywhere*"])


@LAYOUTS
def test_where_the_kernel_refuses_namespaces_their_tests_are_deselected_and_said_so(
        suite, pytester, monkeypatch, workers):
    monkeypatch.delenv("CI", raising=False)
    # a kernel that refuses: here, and in each xdist worker (which loads the conftest)
    monkeypatch.setattr(ci_policy, "NAMESPACE_PROBE", ["false"])
    pytester.makeconftest(PLUGIN + "import ci_policy\nci_policy.NAMESPACE_PROBE = ['false']\n")
    result = suite(*workers)
    # (xdist's controller does not count its workers' deselections)
    result.assert_outcomes(passed=1, skipped=2, deselected=0 if workers else 2)
    result.stdout.fnmatch_lines(["*refuses user namespaces here: 1 namespace-jail tests "
                                 "deselected; the sandbox suite ran its fallback isolation only"])

"""A generated local git repository to build code tasks from (``posttrain synthesize repo
--demo``): a small package whose history adds one function a commit, each in a module of its
own (``pkg/f<i>.py``) with its tests, and, in between, commits the pipeline must drop: a
documentation change, a refactoring with no new test, and a function whose test flips a
coin."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from posttrain.envs.code import FAMILIES

CORE = "def double(x):\n    return 2 * x\n"
TEST_CORE = "from pkg.core import double\n\n\ndef test_double():\n    assert double(3) == 6\n"


def commit(repo: Path, files: dict[str, str], message: str) -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text, encoding="utf-8")
    run = ["git", "-C", str(repo), "-c", "user.name=posttrain", "-c",
           "user.email=posttrain@localhost"]
    subprocess.run([*run, "add", "-A"], check=True, capture_output=True)
    subprocess.run([*run, "commit", "-q", "-m", message], check=True, capture_output=True)


def make_demo_repo(path: str | Path, seed: int = 0, functions: int = 8,
                   flaky: bool = True) -> Path:
    """A new git repository at ``path`` (module docstring): ``functions`` feature commits, a
    docs commit after the second, a refactoring after the fourth, and (``flaky``) a flaky one
    after the sixth."""
    repo = Path(path)
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    rng = random.Random(f"demo-repo:{seed}")
    core = CORE
    commit(repo, {"pkg/__init__.py": "", "pkg/core.py": core, "tests/__init__.py": "",
                   "tests/test_core.py": TEST_CORE, "README.md": "# pkg\n"},
            "Start pkg with double")
    for i in range(functions):
        family = rng.choice(sorted(FAMILIES))
        signature, description, body, make_input = FAMILIES[family]
        c = rng.randint(-5, 9)
        values = {"k": rng.randint(2, 5), "c": c, "c_hi": c + rng.randint(3, 12)}
        name = f"f{i}"
        code = body.format(**values)
        namespace: dict = {}
        exec(f"def f{signature[1:]}:\n    {code}\n", namespace)  # noqa: S102 - our template
        calls = [make_input(rng) for _ in range(3)]
        asserts = "".join(f"    assert {name}({a}) == {namespace['f'](eval(a))!r}\n"  # noqa: S307
                          for a in calls)
        commit(repo, {f"pkg/{name}.py": f"def {name}{signature[1:]}:\n    {code}\n",
                       f"tests/test_{name}.py": f"from pkg.{name} import {name}\n\n\n"
                                                f"def test_{name}():\n{asserts}"},
                f"Add {name}{signature[1:]}: it {description.format(**values)}")
        if i == 1:
            commit(repo, {"README.md": "# pkg\n\nSmall functions, one a commit.\n"},
                    "Describe the package")
        if i == 3:
            core = core.replace("return 2 * x", "return x + x")
            commit(repo, {"pkg/core.py": core}, "Write double as a sum")
        if i == 5 and flaky:
            core += "\n\ndef coin():\n    import random\n    return random.random() < 0.5\n"
            commit(repo, {"pkg/core.py": core, "tests/test_coin.py":
                           "from pkg.core import coin\n\n\ndef test_coin():\n    assert coin()\n"},
                    "Add coin: it flips one")
    return repo

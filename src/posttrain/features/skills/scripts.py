"""Skill scripts run in the sandbox: ``run_skill_script(skill, script, input)`` runs
``scripts/<script>`` of a skill with Python in a fresh ``Sandbox`` whose workspace holds the
skill's files (``scripts/`` and ``references/``), ``input`` on its stdin; the reply is the
exit status and the output. A bad name is answered, not raised."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from posttrain.harness import Tool
from posttrain.sandbox import Sandbox, SandboxLimits

SCRIPT_LIMITS = SandboxLimits(cpu_s=10, wall_s=20.0)


def run_script(directory: Path, files: tuple[str, ...], script: str, stdin: str = "",
               limits: SandboxLimits = SCRIPT_LIMITS) -> str:
    """Run ``scripts/<script>`` of the skill at ``directory`` (its ``files``) in a sandbox."""
    path = f"scripts/{script}"
    if path not in files:
        scripts = [f.removeprefix("scripts/") for f in files if f.startswith("scripts/")]
        return f"no script {script!r}; scripts: {', '.join(scripts) or 'none'}"
    with Sandbox({f: (directory / f).read_text(encoding="utf-8") for f in files},
                 limits) as sandbox:
        r = sandbox.run_python(f"import runpy; runpy.run_path({path!r}, run_name='__main__')",
                               stdin=stdin)
    status = "timed out" if r.timed_out else f"exit code {r.returncode}"
    return f"{status}\n{r.stdout}{r.stderr}".rstrip()


def run_script_tool(run: Callable[[str, str, str], str]) -> Tool:
    """``run_skill_script(skill, script, input)``, answered by ``run``."""
    def run_skill_script(skill: str, script: str, input: str = "") -> str:
        """Run one of a skill's scripts (listed under Files) in a sandbox.

        Args:
            skill: The skill's name.
            script: The script's file name under the skill's scripts/ folder.
            input: Text given to the script on its standard input.
        """
        return run(skill, script, input)

    return Tool(run_skill_script, timeout=SCRIPT_LIMITS.wall_s + 5)

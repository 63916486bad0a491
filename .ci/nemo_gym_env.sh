#!/usr/bin/env bash
# Build the environment NeMo-Gym resources servers run in for task.name=nemo_gym
# (tests/integration/test_nemo_gym_env.py, examples/nemo_gym): a venv of its own, since
# nemo-gym needs Python 3.12 and pins versions this project's install cannot share
# (docs/extending.md, Environments of other libraries). The Python: $POSTTRAIN_PYTHON312, else
# python3.12 on PATH, else pyenv's.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${POSTTRAIN_NEMO_GYM_VENV:-.venv-nemo-gym}
find_python() {
  for candidate in "${POSTTRAIN_PYTHON312:-}" python3.12 \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
    [ -n "$candidate" ] && "$candidate" -c "import sys; assert sys.version_info[:2] == (3, 12)" \
      2>/dev/null && { echo "$candidate"; return; }
  done
  echo "no Python 3.12 for nemo-gym (set POSTTRAIN_PYTHON312)" >&2; return 1
}
[ -x "$VENV/bin/python" ] || "$(find_python)" -m venv "$VENV"
"$VENV/bin/pip" install -q "nemo-gym==0.4.0"
"$VENV/bin/python" -c "import importlib.metadata as m, resources_servers; print('nemo-gym', m.version('nemo-gym'), 'ready in $VENV')"

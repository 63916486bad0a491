#!/usr/bin/env bash
# Build the environment verifiers environments run in for task.name=verifiers
# (tests/integration/test_verifiers_env.py, examples/verifiers): a venv of its own on top of
# this one's packages, since verifiers 0.4 pins openai below 3 and the project has openai 3
# (docs/extending.md, Environments of other libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${POSTTRAIN_VERIFIERS_VENV:-.venv-verifiers}
[ -x "$VENV/bin/python" ] || python -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q "verifiers==0.4.0"
"$VENV/bin/python" -c "import verifiers, openai; print('verifiers', verifiers.__version__, 'with openai', openai.__version__, 'ready in $VENV')"

#!/usr/bin/env bash
# Build the environment tinker-cookbook's recipes run in against posttrain tinker-serve
# (tests/e2e/test_tinker_cookbook.py). It is a venv of its own, on top of this one's packages
# (torch, the tinker SDK): tinker-cookbook 0.5.8 pins transformers 5.5, older than the
# project's, and 0.6.x needs tml-renderers 0.4, which the package index lacks (docs/tinker.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${POSTTRAIN_COOKBOOK_VENV:-.venv-cookbook}
[ -x "$VENV/bin/python" ] || python -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q "tinker-cookbook[math-rl]==0.5.8"  # math-rl: the arithmetic recipe
"$VENV/bin/python" -c "import tinker_cookbook, transformers; print('tinker-cookbook', tinker_cookbook.__version__, 'with transformers', transformers.__version__, 'ready in $VENV')"

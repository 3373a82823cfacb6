#!/usr/bin/env bash
# Set-up, build, and the main job: generate text with the default model.
#   scripts/run.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
MODEL="${BLOCKSPEC_MODEL:-tests/fixtures/golden/qwen3-tiny-f32}"
PROMPT="${1:-To be, or not to be, that is the question:}"
build/blockspec generate -m "$MODEL" -p "$PROMPT" -n 48 --temp 0.8 --top-p 0.95 --seed 1

#!/usr/bin/env bash
# Set-up, build, and the main job: answer a question with the real SmolLM2-135M-Instruct.
#   scripts/run.sh [QUESTION]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
scripts/fetch_models.sh smollm2
MODEL="${BLOCKSPEC_MODEL:-${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}/models/smollm2.gguf}"
QUESTION="${1:-What is speculative decoding, in two sentences?}"
# SmolLM2's chat format (ChatML).
PROMPT="<|im_start|>user
$QUESTION<|im_end|>
<|im_start|>assistant
"
build/blockspec generate -m "$MODEL" -p "$PROMPT" -n 128 --temp 0.7 --top-p 0.9 --seed 1

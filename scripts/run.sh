#!/usr/bin/env bash
# Set-up, build, and the main job: serve the real Qwen2.5-Coder-1.5B-Instruct
# (OpenAI-compatible API on 127.0.0.1:8000) with n-gram lookup in front of its shipped DFlash drafter.
#   scripts/run.sh [extra serve flags...]
#   BLOCKSPEC_RUN_MODEL=smollm2 scripts/run.sh   # the small model instead (94 MB)
#   BLOCKSPEC_SPEC='{"method":"dflash","model":"smollm2-135m-dflash-w8a16"}' ...  # another --speculative-config
# Qwen: lookup + drafter, the faster one measured (README, BENCHMARKS.md session 29); SmolLM2: n-gram lookup.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
NAME="${BLOCKSPEC_RUN_MODEL:-qwen2.5-coder-1.5b}"
scripts/fetch_models.sh "$NAME"
MODEL="${BLOCKSPEC_MODEL:-${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}/models/$NAME.gguf}"
SPEC='{"method":"ngram","prompt_lookup_max":3}'
[ "$NAME" = qwen2.5-coder-1.5b ] && SPEC='{"method":"dflash","model":"qwen2.5-coder-1.5b-dflash-w8a8","prompt_lookup_max":3}'
echo "speculative config: ${BLOCKSPEC_SPEC:-$SPEC}" >&2
echo "serving $MODEL on http://127.0.0.1:8000 (model name \"$NAME\"); Ctrl-C stops it" >&2
exec build/blockspec serve "$MODEL" --served-model-name "$NAME" --host 127.0.0.1 --port 8000 \
  --max-num-seqs 8 --max-model-len 4096 \
  --speculative-config "${BLOCKSPEC_SPEC:-$SPEC}" "$@"

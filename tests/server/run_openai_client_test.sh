#!/usr/bin/env bash
# CTest entry (label e2e): tests/server/openai_client_test.py with the venv
# that scripts/setup.sh makes (pinned openai) and the SmolLM2 GGUF that
# scripts/fetch_models.sh caches.
#   tests/server/run_openai_client_test.sh BLOCKSPEC_BINARY
set -euo pipefail
cache=${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}
py=$cache/venv-openai/bin/python
[[ -x $py ]] || { echo "run_openai_client_test.sh: $py is missing: run scripts/setup.sh" >&2; exit 1; }
model=$cache/models/smollm2.gguf
[[ -f $model ]] || { echo "run_openai_client_test.sh: $model is missing: run scripts/fetch_models.sh smollm2" >&2; exit 1; }
exec "$py" "$(dirname "$0")/openai_client_test.py" --blockspec "$1" --model "$model"

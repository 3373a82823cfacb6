#!/bin/bash
# Reproduces the tables of BENCHMARKS.md on this machine (run it on a quiet
# machine: the numbers are only as good as the machine is idle). Needs a
# Release build in build/ and the models from scripts/fetch_models.sh all.
#   [SERVE_WEIGHTS=q4|q8|default] scripts/benchmarks.sh OUTDIR [engine|serve|all] [NPROMPTS]
# Writes one JSON (or text) file per measurement into OUTDIR.
set -eu
cd "$(dirname "$0")/.."
O=${1:?usage: scripts/benchmarks.sh OUTDIR [engine|serve|all] [NPROMPTS]}
WHAT=${2:-all}
N=${3:-16}
mkdir -p "$O"
Q=${BLOCKSPEC_MODELS:-$HOME/.cache/blockspec/models}/qwen2.5-coder-1.5b.gguf
B=build/blockspec
PROMPTS=data/prompts/mt_bench.jsonl
uptime > "$O/uptime_start.txt"

if [ "$WHAT" = engine ] || [ "$WHAT" = all ]; then
  $B bench -m "$Q" --weights q4 --prompt-len 512 --gen-len 64 --repeats 3 --json > "$O/q4.json" 2> "$O/q4.err"
  $B bench -m "$Q" --weights q8 --prompt-len 512 --gen-len 64 --repeats 3 --json > "$O/q8.json" 2> "$O/q8.err"
  $B bench -m "$Q" --weights bf16 --prompt-len 512 --gen-len 32 --repeats 2 --json > "$O/bf16.json" 2> "$O/bf16.err"
  $B bench -m "$Q" --weights bf16 --activations bf16 --prompt-len 512 --gen-len 32 --repeats 2 --json \
    > "$O/bf16act.json" 2> "$O/bf16act.err"
  for w in fp8 nvfp4 mxfp4; do
    $B bench -m "$Q" --weights $w --prompt-len 128 --gen-len 32 --repeats 1 --json > "$O/$w.json" 2> "$O/$w.err"
  done
  for c in 1 8; do
    $B bench -m "$Q" --weights q4 --prompt-len 128 --gen-len 128 --concurrency $c --repeats 1 --json \
      > "$O/q4c$c.json" 2> "$O/q4c$c.err"
  done
  build/kernels_bench --benchmark_filter='vnni_peak|read_bw|q8/.*/M:512/threads:2' --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true > "$O/kernels.txt" 2>&1
fi

if [ "$WHAT" = serve ] || [ "$WHAT" = all ]; then
  # SERVE_WEIGHTS=default serves the GGUF as it loads without --weights (its blocks as stored).
  WFLAG="--weights ${SERVE_WEIGHTS:-q4}"
  [ "${SERVE_WEIGHTS:-q4}" = default ] && WFLAG=""
  $B serve "$Q" $WFLAG --max-num-seqs 8 --max-model-len 2048 --port 8201 --served-model-name qwen \
    > "$O/serve.log" 2>&1 &
  SP=$!
  trap 'kill $SP 2>/dev/null' EXIT
  for _ in $(seq 180); do curl -sf http://127.0.0.1:8201/health > /dev/null && break; sleep 1; done
  for c in 1 8; do
    $B bench --url http://127.0.0.1:8201 --prompts $PROMPTS --concurrency $c --num-prompts "$N" --max-tokens 128 \
      --json > "$O/serve_c$c.json" 2> "$O/serve_c$c.err"
  done
fi
uptime > "$O/uptime_end.txt"

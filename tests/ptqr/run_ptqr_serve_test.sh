#!/usr/bin/env bash
# CTest entry (label e2e): `blockspec ptqr` on the tiny Qwen2 (q/k/v biases)
# through an int8_block_g128 KV cache, then the checkpoint it wrote served by
# `blockspec serve` like any compressed-tensors W8A8 checkpoint: a greedy
# completion over real HTTP on loopback must equal `blockspec generate` on
# the same checkpoint and KV dtype, and a plain `quantize` W8A8 checkpoint of
# the same model must differ (PTQR changed codes).
#   tests/ptqr/run_ptqr_serve_test.sh BLOCKSPEC_BINARY
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/tests/fixtures/golden/qwen2-tiny-f32
tmp=$(mktemp -d)
server=""
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "run_ptqr_serve_test.sh: $*" >&2; exit 1; }

"$bin" ptqr "$model" "$tmp/ptqr" --calib "$root/data/text/tinyshakespeare.txt" --tokens 256 --window 64 --steps 8 \
  --lr 2e-4 --kv-cache-dtype int8_block_g128 --threads 2 > "$tmp/ptqr.log" 2>&1 || { cat "$tmp/ptqr.log"; fail "ptqr failed"; }
grep -q 'layers retrained' "$tmp/ptqr.log" || { cat "$tmp/ptqr.log"; fail "no report"; }
grep -q '"quant_method": "compressed-tensors"' "$tmp/ptqr/config.json" || fail "config.json has no compressed-tensors quantization_config"
"$bin" quantize "$model" "$tmp/rtn" --scheme w8a8 --no-eval > /dev/null 2>&1 || fail "quantize failed"
cmp -s "$tmp/ptqr/model.safetensors" "$tmp/rtn/model.safetensors" && fail "the PTQR checkpoint equals the RTN one"

prompt="ROMEO: But soft, what light"
gen=$("$bin" generate -m "$tmp/ptqr" -p "$prompt" -n 12 --temp 0 --kv-cache-dtype int8_block_g128 --threads 2 2>/dev/null) \
  || fail "generate failed"
"$bin" serve "$tmp/ptqr" --port 0 --kv-cache-dtype int8_block_g128 --threads 2 > "$tmp/serve.log" 2>&1 &
server=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.log" | head -1)
  [[ -n $port ]] && python3 - "$port" <<'PY' && break
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1)
except Exception:
    sys.exit(1)
PY
  sleep 0.2
done
[[ -n $port ]] || { cat "$tmp/serve.log"; fail "serve did not start"; }
text=$(python3 - "$port" "$prompt" <<'PY'
import json, sys, urllib.request
port, prompt = sys.argv[1], sys.argv[2]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                             headers={"Content-Type": "application/json"},
                             data=json.dumps({"prompt": prompt, "max_tokens": 12, "temperature": 0}).encode())
r = json.load(urllib.request.urlopen(req, timeout=60))
assert r["usage"]["completion_tokens"] == 12, r
print(r["choices"][0]["text"], end="")
PY
) || { cat "$tmp/serve.log"; fail "completion request failed"; }
[[ "$gen" == *"$text"* ]] || fail "served text \"$text\" is not generate's \"$gen\""

# The weight-only grid with held-out windows and SmoothQuant statistics on the first window, through the CLI:
# a W4A16 compressed-tensors checkpoint that `inspect` reads and `generate` runs, and the report's held-out columns.
"$bin" ptqr "$model" "$tmp/w4" --scheme w4a16 --calib "$root/data/text/tinyshakespeare.txt" --tokens 256 --window 64 \
  --steps 8 --lr 2e-4 --holdout 1 --val-every 4 --smooth 0.5 --smooth-tokens 64 --threads 2 > "$tmp/w4.log" 2>&1 \
  || { cat "$tmp/w4.log"; fail "ptqr --scheme w4a16 failed"; }
grep -q 'held-out RTN' "$tmp/w4.log" || { cat "$tmp/w4.log"; fail "no held-out columns in the report"; }
grep -q '"num_bits": 4' "$tmp/w4/config.json" || fail "the w4a16 checkpoint's config.json has no 4-bit weights"
"$bin" inspect "$tmp/w4" > "$tmp/inspect.log" 2>&1 || { cat "$tmp/inspect.log"; fail "inspect failed on the w4a16 PTQR checkpoint"; }
grep -q "q_proj.weight_packed" "$tmp/inspect.log" || { cat "$tmp/inspect.log"; fail "the w4a16 checkpoint has no packed int4 weights"; }
"$bin" generate -m "$tmp/w4" -p "$prompt" -n 4 --temp 0 --threads 2 > /dev/null 2>&1 || fail "generate failed on w4a16"
"$bin" ptqr "$model" "$tmp/bad" --calib "$root/data/text/tinyshakespeare.txt" --tokens 256 --window 64 --holdout 4 \
  > "$tmp/bad.log" 2>&1 && fail "--holdout 4 of 4 windows was accepted"
grep -q -- '--holdout 4' "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "the --holdout error does not name the flag"; }
echo "run_ptqr_serve_test.sh: ok (served \"$text\"; w4a16 with --holdout checked)"

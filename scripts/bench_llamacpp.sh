#!/bin/bash
# blockspec side by side with llama.cpp on the same GGUF, runs interleaved (issue 17's speed table).
# llama.cpp is the copy vendored in the llama-cpp-python sdist from PyPI; it is downloaded and built under
# $BLOCKSPEC_CACHE/llamacpp (outside the repository) and used only to measure. No llama.cpp code is kept here.
#   scripts/bench_llamacpp.sh build                      download the sdist, build llama-bench/-server/-perplexity
#   scripts/bench_llamacpp.sh engine MODEL.gguf [ROUNDS] [OUTDIR]
#       ROUNDS x (llama-bench -p 512 -n 64 -t 2, and -p 0 -n 64 -d 512; blockspec bench --prompt-len 512 --gen-len 64),
#       interleaved, then the medians and blockspec / llama.cpp ratios (decode against tg64 from an empty context,
#       the issue's method, and at depth 512, the context blockspec decodes in).
#   scripts/bench_llamacpp.sh kld MODEL.gguf TEXT [CHUNKS] [OUTDIR]
#       llama.cpp's KL divergence of MODEL against the same file dequantized to F32 (llama-perplexity).
#   scripts/bench_llamacpp.sh serve MODEL.gguf [NPROMPTS] [OUTDIR]
#       llama-server -np 8 and blockspec serve --max-num-seqs 8, one after the other, each driven by
#       `blockspec bench --url` at concurrency 1 and 8 with the same prompts.
# Extra blockspec flags (e.g. --weights q4) go in BS_FLAGS. Needs a Release build in build/.
# LLAMACPP_ISA=avx2 builds and runs a llama.cpp without AVX-512 (build-avx2/), to set beside
# `BLOCKSPEC_ISA=avx2 scripts/bench_llamacpp.sh ...`: both engines as on a CPU with AVX2 only. LLAMACPP_ISA=avxvnni
# (build-avxvnni/) adds AVX-VNNI (vpdpbusd on ymm, Intel client cores from Alder Lake), which blockspec's AVX2 table
# uses where the CPU has it: both engines as on such a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
CACHE=${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}/llamacpp
LISA=${LLAMACPP_ISA:-native}
BDIR=$CACHE/build
[ "$LISA" = avx2 ] && BDIR=$CACHE/build-avx2
[ "$LISA" = avxvnni ] && BDIR=$CACHE/build-avxvnni
BIN=$BDIR/bin
B=build/blockspec
WHAT=${1:?usage: scripts/bench_llamacpp.sh build|engine|kld|serve ...}

build_llamacpp() {
  mkdir -p "$CACHE"
  local src=$CACHE/llama_cpp_python-$VERSION
  if [ ! -d "$src" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE"
    tar xzf "$CACHE/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE"
  fi
  # The ISA blockspec uses, chosen explicitly: GGML_NATIVE would also turn on AMX, whose kernels crash on these
  # VMs (SIGSEGV in ggml_backend_amx_mul_mat; the hypervisor does not grant the tile state) and which blockspec
  # does not use. AVX-512 (with VNNI/BF16 where this CPU has them) or AVX2.
  local isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  [ "$LISA" = avxvnni ] && isa+=(-DGGML_AVX_VNNI=ON)
  if [ "$LISA" = native ]; then
    if grep -q avx512_vnni /proc/cpuinfo; then isa+=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON); fi
    if grep -q avx512_bf16 /proc/cpuinfo; then isa+=(-DGGML_AVX512_BF16=ON); fi
    if grep -q avx512vbmi /proc/cpuinfo; then isa+=(-DGGML_AVX512_VBMI=ON); fi
  fi
  cmake -S "$src/vendor/llama.cpp" -B "$BDIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    "${isa[@]}" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON > /dev/null
  ninja -C "$BDIR" llama-bench llama-server llama-perplexity llama-quantize
}

case "$WHAT" in
build)
  build_llamacpp
  ;;
engine)
  M=${2:?model}
  R=${3:-5}
  O=${4:-$(mktemp -d)}
  mkdir -p "$O"
  [ -x "$BIN/llama-bench" ] || build_llamacpp
  uptime > "$O/uptime_start.txt"
  for r in $(seq "$R"); do
    "$BIN/llama-bench" -m "$M" -p 512 -n 64 -t 2 -r 1 -o json > "$O/llama_$r.json" 2> "$O/llama_$r.err"
    # tg64 above starts from an empty context; blockspec decodes after its 512-token prompt: the same at depth 512.
    "$BIN/llama-bench" -m "$M" -p 0 -n 64 -d 512 -t 2 -r 1 -o json > "$O/llama_d512_$r.json" 2> "$O/llama_d512_$r.err"
    # shellcheck disable=SC2086
    $B bench -m "$M" ${BS_FLAGS:-} --prompt-len 512 --gen-len 64 --repeats 1 --json > "$O/bs_$r.json" 2> "$O/bs_$r.err"
    echo "round $r/$R done" >&2
  done
  uptime > "$O/uptime_end.txt"
  python3 - "$O" "$R" << 'EOF'
import json, statistics, sys
o, R = sys.argv[1], int(sys.argv[2])
lp, lg, ld, bp, bg, bw = [], [], [], [], [], []
for r in range(1, R + 1):
    for t in json.load(open(f"{o}/llama_{r}.json")):
        (lp if t["n_prompt"] > 0 else lg).append(t["avg_ts"])
    ld += [t["avg_ts"] for t in json.load(open(f"{o}/llama_d512_{r}.json"))]
    b = json.load(open(f"{o}/bs_{r}.json"))
    bp.append(b["prefill_tok_s"]); bg.append(b["decode_tok_s"]); bw.append(b.get("bw_fraction", float("nan")))
med = statistics.median
print(f"rounds {R}  (each: llama-bench -p 512 -n 64 -t 2 -r 1 and -p 0 -n 64 -d 512, then blockspec bench --prompt-len 512 --gen-len 64)")
print(f"llama.cpp  pp512 {med(lp):7.1f} tok/s  tg64 {med(lg):6.2f} tok/s   (per round pp {[round(x,1) for x in lp]} tg {[round(x,2) for x in lg]})")
print(f"blockspec  prefill {med(bp):7.1f} tok/s  decode {med(bg):6.2f} tok/s  bw_fraction {med(bw):.2f}   (per round pp {[round(x,1) for x in bp]} tg {[round(x,2) for x in bg]})")
print(f"llama.cpp  tg64 at depth 512 {med(ld):6.2f} tok/s   (per round {[round(x,2) for x in ld]})")
print(f"ratio      prefill {med(bp)/med(lp):.2f}x  decode {med(bg)/med(lg):.2f}x   (per-round decode ratios {[round(b/l,2) for b,l in zip(bg,lg)]})")
print(f"           decode at the same context (llama.cpp at depth 512) {med(bg)/med(ld):.2f}x")
EOF
  ;;
serve)
  M=${2:?model}
  N=${3:-16}
  O=${4:-$(mktemp -d)}
  mkdir -p "$O"
  [ -x "$BIN/llama-server" ] || build_llamacpp
  PROMPTS=data/prompts/mt_bench.jsonl
  run_clients() {  # $1 = label, $2 = port
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$2/health" > /dev/null && break; sleep 1; done
    for c in 1 8; do
      $B bench --url "http://127.0.0.1:$2" --prompts $PROMPTS --concurrency $c --num-prompts "$N" --max-tokens 128 \
        --json > "$O/$1_c$c.json" 2> "$O/$1_c$c.err"
    done
  }
  "$BIN/llama-server" -m "$M" -np 8 -c 16384 -t 2 --port 8202 --alias qwen > "$O/llama_server.log" 2>&1 &
  SP=$!
  run_clients llama 8202
  kill $SP; wait $SP 2>/dev/null || true
  # shellcheck disable=SC2086
  $B serve "$M" ${BS_FLAGS:-} --max-num-seqs 8 --max-model-len 2048 --port 8201 --served-model-name qwen \
    > "$O/bs_server.log" 2>&1 &
  SP=$!
  run_clients bs 8201
  kill $SP; wait $SP 2>/dev/null || true
  for f in "$O"/*_c*.json; do echo "$f: $(cat "$f")"; done
  ;;
kld)
  # llama.cpp's own fidelity on the same text: its KL divergence of MODEL against the same file dequantized to
  # F32 by llama-quantize (--allow-requantize), over CHUNKS windows of 512 tokens (it scores the second half of
  # each window), to set next to `blockspec eval --reference-weights f32`.
  M=${2:?model}
  TEXT=${3:?text file}
  CH=${4:-40}
  O=${5:-$(mktemp -d)}
  mkdir -p "$O"
  [ -x "$BIN/llama-perplexity" ] && [ -x "$BIN/llama-quantize" ] || build_llamacpp
  F32=$O/$(basename "$M" .gguf)-f32.gguf
  [ -f "$F32" ] || "$BIN/llama-quantize" --allow-requantize "$M" "$F32" F32 2 > "$O/quantize.log" 2>&1
  "$BIN/llama-perplexity" -m "$F32" -f "$TEXT" -c 512 --chunks "$CH" -t 2 --kl-divergence-base "$O/base.kld" \
    > "$O/base.log" 2>&1
  "$BIN/llama-perplexity" -m "$M" -f "$TEXT" -c 512 --chunks "$CH" -t 2 --kl-divergence-base "$O/base.kld" \
    --kl-divergence > "$O/kld.log" 2>&1
  rm -f "$F32"
  sed -n '/KL divergence statistics/,$p' "$O/kld.log"
  ;;
*)
  echo "scripts/bench_llamacpp.sh: unknown command '$WHAT' (build, engine, kld or serve)" >&2
  exit 2
  ;;
esac

#!/bin/bash
# Issue 22 (busy machine) sitting: decode and serving idle vs one core kept busy by a shell loop, interleaved,
# from the repository root: scripts/bench_busy.sh OUT_DIR (BENCHMARKS.md "Decoding on a busy machine").
Q=$HOME/.cache/blockspec/models/qwen2.5-coder-1.5b.gguf
B=build/blockspec
O=${1:?usage: scripts/bench_busy.sh OUT_DIR}; mkdir -p "$O"
P=data/prompts/mt_bench.jsonl
busy_on() { bash -c 'while :; do :; done' & BP=$!; sleep 1; }
busy_off() { kill $BP; wait $BP 2>/dev/null; }
uptime > "$O"/uptime_start.txt
for r in 1 2 3; do
  for w in stored q4; do
    args=(bench -m $Q --prompt-len 64 --gen-len 48 --repeats 3 --json); [ $w = q4 ] && args+=(--weights q4)
    $B "${args[@]}" > "$O"/idle.$w.r$r.json 2> "$O"/idle.$w.r$r.err
    busy_on; $B "${args[@]}" > "$O"/busy.$w.r$r.json 2> "$O"/busy.$w.r$r.err; busy_off
    $B "${args[@]}" --threads 1 > "$O"/t1.$w.r$r.json 2> "$O"/t1.$w.r$r.err
  done
done
"$B" serve "$Q" --max-num-seqs 8 --max-model-len 2048 --port 18222 --served-model-name m > "$O"/serve.log 2>&1 &
SP=$!
for i in $(seq 120); do curl -sf localhost:18222/health >/dev/null && break; sleep 1; done
for r in 1 2; do
  for c in 1 8; do
    for s in idle busy; do
      [ $s = busy ] && busy_on
      $B bench --url http://localhost:18222 --prompts $P --num-prompts 8 --max-tokens 64 -c $c --json > "$O"/serve.$s.c$c.r$r.json 2> "$O"/serve.$s.c$c.r$r.err
      [ $s = busy ] && busy_off
    done
  done
done
kill $SP; wait $SP 2>/dev/null
uptime > "$O"/uptime_end.txt
echo done

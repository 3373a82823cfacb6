#!/bin/bash
# Speculative decoding through `blockspec serve` with a trained drafter, the
# tables of BENCHMARKS.md "Trained DFlash drafters": for each server config
# (plain, n-gram, DFlash with the engine's draft length, DFlash at fixed K,
# the quantized drafter, n-gram lookup in front of the (quantized) drafter) and each held-out prompt set, output tok/s at
# concurrency 1 and 8, acceptance per position, and a check that every
# greedy output is identical to plain decoding's. Run it on a quiet machine.
# The drafter's config picks the method (dflash or dflash2). BENCH_SETS and
# BENCH_CONC narrow the prompt sets and concurrencies (default: all three, 1 and 8), BENCH_ROUNDS repeats them,
# BENCH_CONFIGS the server configs (names as in the table: plain ngram dflash ...), BENCH_BASELINE a second drafter.
# Every server runs without prefix caching: each set's prompts repeat from the
# c = 1 pass to the c = 8 pass, which would otherwise prefill from the cache
# (scripts/bench_multiturn.py measures caching, with and without a drafter).
#   scripts/bench_drafter.sh OUTDIR MODEL DRAFTER [DRAFTER_QUANTIZED] [NPROMPTS] [MAXTOK]
set -eu
cd "$(dirname "$0")/.."
O=${1:?usage: scripts/bench_drafter.sh OUTDIR MODEL DRAFTER [DRAFTER_QUANTIZED] [NPROMPTS] [MAXTOK]}
M=${2:?model}
D=${3:?drafter}
DQ=${4:-}
N=${5:-16}
T=${6:-128}
B=build/blockspec
P=${BLOCKSPEC_PROMPTS:-data/prompts}
K=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]+'/config.json'))['block_size']-1)" "$D")
MD=$(python3 -c "import json,sys; print('dflash2' if json.load(open(sys.argv[1]+'/config.json'))['architectures'][0] == 'DFlash2DraftModel' else 'dflash')" "$D")
SETS=${BENCH_SETS:-gsm8k_test humaneval mt_bench}
CONCS=${BENCH_CONC:-1 8}
mkdir -p "$O"
uptime > "$O/uptime_start.txt"
configs=("plain:" "ngram:{\"method\":\"ngram\",\"prompt_lookup_max\":3}" "dflash:{\"method\":\"$MD\",\"model\":\"$D\"}")
for k in 3 7 15; do
  [ "$k" -le "$K" ] && configs+=("dflash_k$k:{\"method\":\"$MD\",\"model\":\"$D\",\"num_speculative_tokens\":$k}")
done
[ -n "$DQ" ] && configs+=("dflash_quant:{\"method\":\"$MD\",\"model\":\"$DQ\"}")
# The quantized drafter at K = 7 as well: its acceptance per position against the master's at the same K.
[ -n "$DQ" ] && [ "$K" -ge 7 ] && configs+=("dflash_quant_k7:{\"method\":\"$MD\",\"model\":\"$DQ\",\"num_speculative_tokens\":7}")
# n-gram lookup first, the drafter where it finds no match (prompt_lookup_max with a drafter).
configs+=("lookup_dflash:{\"method\":\"$MD\",\"model\":\"${DQ:-$D}\",\"prompt_lookup_max\":3}")
# BENCH_BASELINE=DIR adds "baseline": another drafter (e.g. the one it would replace) at the engine's draft length, and
# "baseline_lookup": the same drafter behind n-gram lookup, to compare with lookup_dflash in one sitting.
if [ -n "${BENCH_BASELINE:-}" ]; then
  configs+=("baseline:{\"method\":\"$MD\",\"model\":\"$BENCH_BASELINE\"}")
  configs+=("baseline_lookup:{\"method\":\"$MD\",\"model\":\"$BENCH_BASELINE\",\"prompt_lookup_max\":3}")
fi
# Every server runs at once (started one after another, so each times its verify cost alone; an idle
# server takes no CPU), and BENCH_ROUNDS rounds (default 1) go over the sets with the configs in an
# order that rotates each round: ratios to plain are taken within a round, so the host's drift between
# minutes (seen: plain 29-36 tok/s in one hour) cancels out.
ROUNDS=${BENCH_ROUNDS:-1}
names=(); ports=(); pids=()
port=8310
for c in "${configs[@]}"; do
  name=${c%%:*}
  spec=${c#*:}
  if [ -n "${BENCH_CONFIGS:-}" ] && [[ " $BENCH_CONFIGS " != *" $name "* ]]; then continue; fi
  args=(serve "$M" --max-num-seqs 8 --max-model-len 2048 --port $port --served-model-name m --no-enable-prefix-caching)
  [ -n "$spec" ] && args+=(--speculative-config "$spec")
  $B "${args[@]}" > "$O/$name.serve.log" 2>&1 &
  pids+=($!); names+=("$name"); ports+=($port)
  for _ in $(seq 120); do curl -sf http://127.0.0.1:$port/health > /dev/null && break; sleep 1; done
  port=$((port + 1))
done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
n=${#names[@]}
for r in $(seq "$ROUNDS"); do
  suffix=""; [ "$r" -gt 1 ] && suffix=".r$r"
  for set in $SETS; do
    for conc in $CONCS; do
      for i in $(seq 0 $((n - 1))); do
        x=$(((i + r - 1) % n)); name=${names[$x]}
        $B bench --url http://127.0.0.1:${ports[$x]} --prompts "$P/$set.jsonl" --concurrency $conc --num-prompts "$N" \
          --max-tokens "$T" --json > "$O/$name.$set.c$conc$suffix.json" 2> "$O/$name.$set.c$conc$suffix.err"
      done
    done
  done
  # Sampling (T = 0.7): acceptance only; the distribution is exact by construction and by the tests.
  for i in $(seq 0 $((n - 1))); do
    x=$(((i + r - 1) % n)); name=${names[$x]}
    $B bench --url http://127.0.0.1:${ports[$x]} --prompts "$P/gsm8k_test.jsonl" --concurrency 1 --num-prompts "$N" \
      --max-tokens "$T" --temperature 0.7 --json > "$O/$name.gsm8k_test.t07$suffix.json" 2> "$O/$name.gsm8k_test.t07$suffix.err"
  done
done
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true
uptime > "$O/uptime_end.txt"
python3 - "$O" <<'PY'
import json, sys, glob, os, statistics
o = sys.argv[1]
def load(n):
    p = os.path.join(o, n)
    return json.load(open(p)) if os.path.exists(p) else None
def rounds(stem):  # round 1's file, then .r2, .r3, ...
    out, r = [], 1
    while True:
        j = load(f'{stem}.json' if r == 1 else f'{stem}.r{r}.json')
        if not j: return out
        out.append(j); r += 1
names = sorted({os.path.basename(p).split('.')[0] for p in glob.glob(o + '/*.json')},
               key=lambda n: ['plain', 'ngram', 'dflash'].index(n) if n in ('plain', 'ngram', 'dflash') else 9)
def spec_sum(js):  # acceptance over every round
    sp = [j.get('spec', {}) for j in js]
    d = sum(s.get('num_drafts', 0) for s in sp)
    acc = sum(s.get('num_accepted_tokens', 0) for s in sp)
    K = max([len(s.get('acceptance_per_pos', [])) for s in sp] + [0])
    per = [sum(s['acceptance_per_pos'][i] * s['num_drafts'] for s in sp if len(s.get('acceptance_per_pos', [])) > i) / d
           for i in range(K)] if d else []
    return dict(tau=round(1 + acc / d, 3) if d else 0.0, per_pos=[round(x, 3) for x in per], drafts=d,
                lookup_drafts=sum(s.get('num_lookup_drafts', 0) for s in sp),
                lookup_accepted=sum(s.get('num_lookup_accepted_tokens', 0) for s in sp))
rows = []
for set_ in ['gsm8k_test', 'humaneval', 'mt_bench']:
    for c in (1, 8):
        base = rounds(f'plain.{set_}.c{c}')
        for n in names:
            js = rounds(f'{n}.{set_}.c{c}')
            if not js: continue
            same = bool(base) and all(j['outputs'] == base[0]['outputs'] for j in js)
            ratios = [j['output_tok_s'] / b['output_tok_s'] for j, b in zip(js, base)]
            rows.append(dict(config=n, set=set_, c=c, tok_s=round(statistics.median(j['output_tok_s'] for j in js), 2),
                             vs_plain=round(statistics.median(ratios), 3) if ratios else None,
                             vs_plain_rounds=[round(x, 3) for x in ratios], **spec_sum(js),
                             identical_to_plain=same, errors=sum(j['errors'] for j in js)))
for n in names:
    js = rounds(f'{n}.gsm8k_test.t07')
    if js:
        rows.append(dict(config=n, set='gsm8k_test T=0.7', c=1,
                         tok_s=round(statistics.median(j['output_tok_s'] for j in js), 2), **spec_sum(js),
                         errors=sum(j['errors'] for j in js)))
json.dump(rows, open(os.path.join(o, 'summary.json'), 'w'), indent=1)
for r in rows: print(r)
PY

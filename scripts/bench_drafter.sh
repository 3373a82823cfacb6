#!/bin/bash
# Speculative decoding through `blockspec serve` with a trained drafter, the
# tables of BENCHMARKS.md "Trained DFlash drafters": for each server config
# (plain, n-gram, DFlash with the engine's draft length, DFlash at fixed K,
# the quantized drafter, n-gram lookup in front of the (quantized) drafter) and each held-out prompt set, output tok/s at
# concurrency 1 and 8, acceptance per position, and a check that every
# greedy output is identical to plain decoding's. Run it on a quiet machine.
# The drafter's config picks the method (dflash or dflash2). BENCH_SETS and
# BENCH_CONC narrow the prompt sets and concurrencies (default: all three, 1 and 8),
# BENCH_CONFIGS the server configs (names as in the table: plain ngram dflash ...).
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
# n-gram lookup first, the drafter where it finds no match (prompt_lookup_max with a drafter).
configs+=("lookup_dflash:{\"method\":\"$MD\",\"model\":\"${DQ:-$D}\",\"prompt_lookup_max\":3}")
port=8310
for c in "${configs[@]}"; do
  name=${c%%:*}
  spec=${c#*:}
  if [ -n "${BENCH_CONFIGS:-}" ] && [[ " $BENCH_CONFIGS " != *" $name "* ]]; then continue; fi
  args=(serve "$M" --max-num-seqs 8 --max-model-len 2048 --port $port --served-model-name m --no-enable-prefix-caching)
  [ -n "$spec" ] && args+=(--speculative-config "$spec")
  $B "${args[@]}" > "$O/$name.serve.log" 2>&1 &
  sp=$!
  for _ in $(seq 120); do curl -sf http://127.0.0.1:$port/health > /dev/null && break; sleep 1; done
  for set in $SETS; do
    for conc in $CONCS; do
      $B bench --url http://127.0.0.1:$port --prompts "$P/$set.jsonl" --concurrency $conc --num-prompts "$N" \
        --max-tokens "$T" --json > "$O/$name.$set.c$conc.json" 2> "$O/$name.$set.c$conc.err"
    done
  done
  # Sampling (T = 0.7): acceptance only; the distribution is exact by construction and by the tests.
  $B bench --url http://127.0.0.1:$port --prompts "$P/gsm8k_test.jsonl" --concurrency 1 --num-prompts "$N" \
    --max-tokens "$T" --temperature 0.7 --json > "$O/$name.gsm8k_test.t07.json" 2> "$O/$name.gsm8k_test.t07.err"
  kill $sp
  wait $sp 2>/dev/null || true
  port=$((port + 1))
done
uptime > "$O/uptime_end.txt"
python3 - "$O" <<'PY'
import json, sys, glob, os
o = sys.argv[1]
def load(n):
    p = os.path.join(o, n)
    return json.load(open(p)) if os.path.exists(p) else None
names = sorted({os.path.basename(p).split('.')[0] for p in glob.glob(o + '/*.json')},
               key=lambda n: ['plain', 'ngram', 'dflash'].index(n) if n in ('plain', 'ngram', 'dflash') else 9)
rows = []
for set_ in ['gsm8k_test', 'humaneval', 'mt_bench']:
    for c in (1, 8):
        base = load(f'plain.{set_}.c{c}.json')
        for n in names:
            j = load(f'{n}.{set_}.c{c}.json')
            if not j: continue
            same = base is not None and j['outputs'] == base['outputs']
            sp = j.get('spec', {})
            rows.append(dict(config=n, set=set_, c=c, tok_s=round(j['output_tok_s'], 2),
                             vs_plain=round(j['output_tok_s'] / base['output_tok_s'], 3) if base else None,
                             tau=round(sp.get('mean_acceptance_length', 0), 3),
                             per_pos=[round(x, 3) for x in sp.get('acceptance_per_pos', [])],
                             lookup_drafts=sp.get('num_lookup_drafts', 0), drafts=sp.get('num_drafts', 0),
                             identical_to_plain=same, errors=j['errors']))
for n in names:
    j = load(f'{n}.gsm8k_test.t07.json')
    if j:
        sp = j.get('spec', {})
        rows.append(dict(config=n, set='gsm8k_test T=0.7', c=1, tok_s=round(j['output_tok_s'], 2),
                         tau=round(sp.get('mean_acceptance_length', 0), 3),
                         per_pos=[round(x, 3) for x in sp.get('acceptance_per_pos', [])], errors=j['errors']))
json.dump(rows, open(os.path.join(o, 'summary.json'), 'w'), indent=1)
for r in rows: print(r)
PY

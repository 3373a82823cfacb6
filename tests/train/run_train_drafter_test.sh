#!/usr/bin/env bash
# CTest entry (label e2e): `blockspec train-drafter` learns. On SmolLM2-135M
# (scripts/fetch_models.sh smollm2) and 64 gsm8k training prompts it
# generates the target's own responses with taps through the batched engine,
# trains a 1-layer DFlash drafter for a few minutes, and must raise the
# held-out expected acceptance length (eal, training.md §3) well above the
# untrained drafter's. The result must pass `blockspec check` and, served
# through --speculative-config, give exactly the tokens of plain decoding.
# Then a DFlash2 drafter (block convolutions + candidate selector) trains on
# the same data (--train-only) and must do the same.
#   tests/train/run_train_drafter_test.sh BLOCKSPEC_BINARY
set -euo pipefail
bs=$1
here=$(cd "$(dirname "$0")" && pwd)
cache=${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}
model=$cache/models/smollm2.gguf
[[ -f $model ]] || { echo "run_train_drafter_test.sh: $model is missing: run scripts/fetch_models.sh smollm2" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Bad position-weight, block-attention and matmul flags: a one-line error and a non-zero exit before anything loads.
for bad in "--position-weights foo" "--position-weights dpace --gamma 2" "--dpace-alpha 0.3" \
           "--position-weights dpace --dpace-alpha 1.5" "--position-weights dpace --method dflash2" \
           "--block-attention foo" "--block-attention causal --method dflash2" "--matmul f16"; do
  # shellcheck disable=SC2086
  if "$bs" train-drafter "$model" "$out/bad" --prompts "$here/../../data/prompts/gsm8k_train.jsonl" $bad 2> "$out/err"; then
    echo "train-drafter accepted $bad" >&2; exit 1
  fi
  grep -q "error: train-drafter:" "$out/err" || { echo "no error line for $bad:" >&2; cat "$out/err" >&2; exit 1; }
done
if "$bs" train-drafter "$model" "$out/bad" --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 0 \
     --data-only 2> "$out/err"; then
  echo "train-drafter accepted --num-prompts 0" >&2; exit 1
fi
grep -q "error: --num-prompts must be at least 1" "$out/err" || { cat "$out/err" >&2; exit 1; }
# Per-file counts: one per --prompts file.
if "$bs" train-drafter "$model" "$out/bad" --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 4,4 \
     --data-only 2> "$out/err"; then
  echo "train-drafter accepted --num-prompts 4,4 for one file" >&2; exit 1
fi
grep -q "error: --num-prompts: 2 counts for 1 --prompts files" "$out/err" || { cat "$out/err" >&2; exit 1; }
"$bs" train-drafter "$model" "$out/drafter" --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 64 \
  --max-new-tokens 96 --concurrency 16 --epochs 30 --max-anchors 64 --seq-len 1024 --lr 2e-3 --threads 2 \
  2> "$out/log" || { cat "$out/log" >&2; exit 1; }
grep -E '^(data:|step|done)' "$out/log" | tail -5
# held-out eal before and after from OUT's log; fails unless it rose by >= 0.3.
check_eal() {
  local line before after
  line=$(grep '^done:' "$1")
  read -r before after < <(sed -E 's/.*held-out eal ([0-9.]+) -> ([0-9.]+).*/\1 \2/' <<< "$line")
  python3 - "$before" "$after" "$2" <<'PY'
import sys
before, after = map(float, sys.argv[1:3])
print(f"{sys.argv[3]}: held-out eal: untrained {before:.3f}, trained {after:.3f}")
assert before < 1.15, f"an untrained drafter should accept almost nothing, eal {before}"
assert after >= before + 0.3, f"training did not raise the held-out eal enough: {before} -> {after}"
PY
}
check_eal "$out/log" dflash
"$bs" check "$out/drafter" --target "$model"
prompt='Tom has 3 apples and buys 5 more. How many apples does he have?'
plain=$("$bs" generate -m "$model" -p "$prompt" -n 48 --threads 2)
spec=$("$bs" generate -m "$model" -p "$prompt" -n 48 --threads 2 \
  --speculative-config "{\"method\":\"dflash\",\"model\":\"$out/drafter\"}")
[[ "$plain" == "$spec" ]] || { echo "DFlash output differs from plain decoding:"; echo "$plain"; echo "---"; echo "$spec"; exit 1; }

# --init: a run started from the trained drafter (as saved, bf16, and quantized W8A8 by `blockspec quantize`)
# begins at its held-out eal, not the untrained drafter's; shape flags that disagree with it fail.
"$bs" quantize "$out/drafter" "$out/drafter_w8a8" --scheme w8a8 --group -1 --target "$model" 2> "$out/qlog" \
  || { cat "$out/qlog" >&2; exit 1; }
trained=$(sed -nE 's/^done:.*held-out eal [0-9.]+ -> ([0-9.]+).*/\1/p' "$out/log")
for from in drafter drafter_w8a8; do
  mkdir -p "$out/init_$from"
  ln -s "$out/drafter/data" "$out/init_$from/data"
  "$bs" train-drafter "$model" "$out/init_$from" --init "$out/$from" --train-only \
    --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 64 --epochs 1 --max-steps 1 --lr 1e-6 \
    --max-anchors 64 --seq-len 1024 --threads 2 2> "$out/log_init" || { cat "$out/log_init" >&2; exit 1; }
  grep -q "^init: the parameters of $out/$from" "$out/log_init" || { cat "$out/log_init" >&2; exit 1; }
  start=$(sed -nE 's/^done:.*held-out eal ([0-9.]+) -> .*/\1/p' "$out/log_init")
  python3 -c "import sys; s, t = map(float, sys.argv[1:]); print(f'--init $from: held-out eal at start {s:.3f}, trained {t:.3f}'); \
assert abs(s - t) <= 0.1, 'a run from --init must start where its drafter ended'" "$start" "$trained"
done
for bad in "--layers 2" "--block-size 4" "--method dflash2" "--block-attention causal" "--taps 1,2,3" "--draft-vocab 4096"; do
  # shellcheck disable=SC2086
  if "$bs" train-drafter "$model" "$out/bad_init" --init "$out/drafter" --train-only \
       --prompts "$here/../../data/prompts/gsm8k_train.jsonl" $bad 2> "$out/err"; then
    echo "train-drafter --init accepted $bad" >&2; exit 1
  fi
  grep -q "error: --init: " "$out/err" || { echo "no --init error line for $bad:" >&2; cat "$out/err" >&2; exit 1; }
done
# --vocab-from-data: the full-vocabulary drafter's layers under the 4096 most frequent response tokens of the data
# (the head is the target's frozen rows): it starts where the drafter ended (those tokens cover the responses),
# writes a 4096-row head with its d2t map, and serves exactly.
mkdir -p "$out/revocab"
ln -s "$out/drafter/data" "$out/revocab/data"
"$bs" train-drafter "$model" "$out/revocab" --init "$out/drafter" --vocab-from-data --draft-vocab 4096 --train-only \
  --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 64 --epochs 1 --max-steps 1 --lr 1e-6 \
  --max-anchors 64 --seq-len 1024 --threads 2 2> "$out/log_rv" || { cat "$out/log_rv" >&2; exit 1; }
start=$(sed -nE 's/^done:.*held-out eal ([0-9.]+) -> .*/\1/p' "$out/log_rv")
python3 - "$out/revocab" "$start" "$trained" <<'PY'
import json, sys
d, s, t = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
ids = json.load(open(d + "/draft_vocab.json"))["ids"]
cfg = json.load(open(d + "/config.json"))
print(f"--vocab-from-data: {len(ids)} ids, held-out eal at start {s:.3f}, trained {t:.3f}")
assert len(ids) == 4096 and ids == sorted(set(ids)), "4096 distinct ids, ascending"
assert cfg.get("draft_vocab_size") == 4096, cfg
assert abs(s - t) <= 0.1, "the trained layers must carry over to the re-chosen vocabulary"
PY
"$bs" check "$out/revocab" --target "$model"
spec=$("$bs" generate -m "$model" -p "$prompt" -n 48 --threads 2 \
  --speculative-config "{\"method\":\"dflash\",\"model\":\"$out/revocab\"}")
[[ "$plain" == "$spec" ]] || { echo "--vocab-from-data drafter output differs from plain decoding"; exit 1; }
# --vocab-from FILE: the ids counted over another file's responses (the committed SmolLM2 answers, 4,976 records)
# instead of this run's 64: exactly the 4096 most frequent response tokens of that file (ties by id), which differ
# from the run's own choice above.
resp="$here/../../data/train/smollm2-135m/responses.bin"
mkdir -p "$out/revocab2"
ln -s "$out/drafter/data" "$out/revocab2/data"
"$bs" train-drafter "$model" "$out/revocab2" --init "$out/drafter" --vocab-from-data --vocab-from "$resp" \
  --draft-vocab 4096 --train-only --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 64 --epochs 1 \
  --max-steps 1 --lr 1e-6 --max-anchors 64 --seq-len 1024 --threads 2 2> "$out/log_rv2" || { cat "$out/log_rv2" >&2; exit 1; }
python3 - "$resp" "$out/revocab2" "$out/revocab" <<'PY'
import collections, json, struct, sys
f = open(sys.argv[1], "rb").read()
assert f[:8] == b"BSDRDAT1"
n_taps, hidden, tap_bytes = struct.unpack_from("<qqq", f, 8)
off, count = 64, collections.Counter()
while off < len(f):
    _, _, nt, npr, rows = struct.unpack_from("<qqqqq", f, off); off += 40
    count.update(struct.unpack_from("<%di" % nt, f, off)[npr:]); off += 4 * nt
    off += rows * n_taps * hidden * (tap_bytes or 4)
want = sorted(sorted(count, key=lambda t: (-count[t], t))[:4096])
got = json.load(open(sys.argv[2] + "/draft_vocab.json"))["ids"]
run = json.load(open(sys.argv[3] + "/draft_vocab.json"))["ids"]
print(f"--vocab-from: 4096 ids counted over {sum(count.values())} response tokens; {len(set(got) - set(run))} not in the run's own choice")
assert got == want, "the ids must be the file's 4096 most frequent response tokens"
assert got != run, "a file of other answers must give other ids than the run's data"
PY
"$bs" check "$out/revocab2" --target "$model"
for bad in "--vocab-from $here/../../data/train/qwen2.5-coder-1.5b/responses.bin|outside the target's vocabulary" \
           "--vocab-from $out/nothing|is not a file" "--no-rv --vocab-from $resp|keeps its own draft ids"; do
  flags=${bad%%|*}; want=${bad#*|}
  rv=(--vocab-from-data); [[ $flags == --no-rv* ]] && { rv=(); flags=${flags#--no-rv }; }
  rm -rf "$out/bad_vf"; mkdir -p "$out/bad_vf"; ln -s "$out/drafter/data" "$out/bad_vf/data"
  # shellcheck disable=SC2086
  if "$bs" train-drafter "$model" "$out/bad_vf" --init "$out/drafter" "${rv[@]}" $flags --draft-vocab 4096 --train-only \
       --prompts "$here/../../data/prompts/gsm8k_train.jsonl" --num-prompts 64 --max-steps 1 2> "$out/err"; then
    echo "train-drafter accepted $flags" >&2; exit 1
  fi
  grep -q "error: .*$want" "$out/err" || { echo "no error line for $flags:" >&2; cat "$out/err" >&2; exit 1; }
done
if "$bs" train-drafter "$model" "$out/bad_rv" --vocab-from-data --train-only \
     --prompts "$here/../../data/prompts/gsm8k_train.jsonl" 2> "$out/err"; then
  echo "train-drafter accepted --vocab-from-data without --init" >&2; exit 1
fi
grep -q "error: --vocab-from-data is for --init" "$out/err" || { cat "$out/err" >&2; exit 1; }
if "$bs" train-drafter "$model" "$out/bad_rv" --init "$out/drafter" --vocab-from-data --train-only \
     --prompts "$here/../../data/prompts/gsm8k_train.jsonl" 2> "$out/err"; then
  echo "train-drafter accepted --vocab-from-data of a full-vocabulary drafter without --draft-vocab" >&2; exit 1
fi
grep -q "error: --vocab-from-data: .*has the full vocabulary; give --draft-vocab N" "$out/err" || { cat "$out/err" >&2; exit 1; }
if "$bs" train-drafter "$model" "$out/bad_init" --init "$out/nothing" --prompts "$here/../../data/prompts/gsm8k_train.jsonl" \
     2> "$out/err"; then echo "train-drafter accepted --init of a missing folder" >&2; exit 1; fi
grep -q "error: --init: .*is not a drafter checkpoint" "$out/err" || { cat "$out/err" >&2; exit 1; }

mkdir -p "$out/drafter2"
ln -s "$out/drafter/data" "$out/drafter2/data"
"$bs" train-drafter "$model" "$out/drafter2" --method dflash2 --train-only --prompts "$here/../../data/prompts/gsm8k_train.jsonl" \
  --num-prompts 64 --epochs ${DFLASH2_EPOCHS:-20} --max-anchors 64 --seq-len 1024 --lr 2e-3 --threads 2 \
  2> "$out/log2" || { cat "$out/log2" >&2; exit 1; }
grep -E '^(step|done)' "$out/log2" | tail -3
check_eal "$out/log2" dflash2
"$bs" check "$out/drafter2" --target "$model"
spec=$("$bs" generate -m "$model" -p "$prompt" -n 48 --threads 2 \
  --speculative-config "{\"method\":\"dflash2\",\"model\":\"$out/drafter2\"}")
[[ "$plain" == "$spec" ]] || { echo "DFlash2 output differs from plain decoding:"; echo "$plain"; echo "---"; echo "$spec"; exit 1; }
echo "train-drafter e2e: ok"

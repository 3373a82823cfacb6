#!/usr/bin/env bash
# Builds fuzz/TARGET_fuzz.cc with libFuzzer + ASan + UBSan and runs it.
#   scripts/fuzz.sh TARGET SECONDS WORKDIR
# e.g. scripts/fuzz.sh safetensors_header 20 build/fuzz  (CTest: fuzz_safetensors)
#      scripts/fuzz.sh gguf_header 20 build/fuzz         (CTest: fuzz_gguf)
#      scripts/fuzz.sh openai_request 20 build/fuzz      (CTest: fuzz_openai_request)
# Needs clang++ with libFuzzer (Debian 12: apt-get install clang libclang-rt-14-dev)
# and the nlohmann-json3-dev headers. Exits non-zero on any crash, sanitizer
# report or leak; the crashing input is left in WORKDIR/TARGET/artifacts/.
# CXX_FUZZ overrides the compiler (CXX is left alone: the main build may be g++);
# JOBS sets the parallel compile count (default 2).
set -euo pipefail

# Everything runs inside main, so bash has parsed the whole script before the
# long fuzzer run starts: editing this file during a run cannot break it.
main() {
if [[ $# -ne 3 ]]; then
  echo "usage: $0 TARGET SECONDS WORKDIR" >&2
  exit 2
fi
target=$1 seconds=$2 workdir=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=$root/fuzz/${target}_fuzz.cc
[[ -f $src ]] || { echo "fuzz.sh: no fuzz target $src" >&2; exit 2; }

cxx=${CXX_FUZZ:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-14 clang++-15 clang++-16; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
[[ -n $cxx ]] || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

out=$workdir/$target
mkdir -p "$out/obj" "$out/corpus" "$out/artifacts"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -I"$root/src")

# Sources: the layers the parsers link against and the whole formats layer
# (every target's parser lives there). They go into an archive, so the linker
# takes only the objects a target uses. Each is compiled once per change
# (make-style check on mtime).
sources=("$root"/src/base/*.cc "$root"/src/tensor/*.cc "$root"/src/formats/*.cc
         "$root"/src/server/openai_request.cc "$root"/src/server/python_json.cc "$root"/src/server/tool_calls.cc
         "$root"/src/grammar/*.cc "$root"/src/tokenizer/unicode_text.cc)
objs=()
pids=()
jobs=${JOBS:-2}
for s in "${sources[@]}"; do
  o=$out/obj/$(basename "${s%.cc}").o
  objs+=("$o")
  if [[ ! -f $o || $s -nt $o || $(find "$root/src" -name '*.h' -newer "$o" | head -1) ]]; then
    "$cxx" "${flags[@]}" -c "$s" -o "$o" &
    pids+=($!)
    if (( ${#pids[@]} >= jobs )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
lib=$out/obj/libfuzz_deps.a
rm -f "$lib"
ar rcs "$lib" "${objs[@]}"
bin=$out/${target}_fuzz
"$cxx" "${flags[@]}" -fsanitize=fuzzer "$src" "$lib" -o "$bin" -lpthread -lutf8proc

# Seed corpus: header bytes (8-byte length + JSON) of every fixture, plus the
# whole small fixtures, plus index files.
fix=$root/tests/fixtures/safetensors
if [[ $target == safetensors_header && -d $fix ]]; then
  while IFS= read -r -d '' f; do
    name=$(echo "$f" | sed 's|[^A-Za-z0-9._-]|_|g')
    n=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
    if [[ -n $n ]] && (( n < 65536 )); then head -c $((8 + n)) "$f" > "$out/corpus/hdr_$name"; fi
    if (( $(stat -c %s "$f") < 4096 )); then cp "$f" "$out/corpus/full_$name"; fi
  done < <(find "$fix" -name '*.safetensors' -print0)
  while IFS= read -r -d '' f; do
    cp "$f" "$out/corpus/idx_$(basename "$f")"
  done < <(find "$fix" -name '*.index.json' -print0)
fi

# GGUF: the whole fixture files (inputs past -max_len are cut, which also
# seeds truncations).
if [[ $target == gguf_header && -d $root/tests/fixtures/gguf ]]; then
  for f in "$root"/tests/fixtures/gguf/*.gguf; do cp "$f" "$out/corpus/full_$(basename "$f")"; done
fi

# OpenAI request bodies: one valid request per endpoint shape.
if [[ $target == openai_request ]]; then
  printf '%s' '{"model":"m","prompt":"Hello","max_tokens":8,"temperature":0.7,"top_p":0.9,"top_k":40,"seed":1,"stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true}}' > "$out/corpus/completion.json"
  printf '%s' '{"prompt":[[1,2,3]],"max_tokens":2,"stop_token_ids":[5],"ignore_eos":true,"presence_penalty":0.5,"frequency_penalty":-0.5,"n":1,"logprobs":null}' > "$out/corpus/completion_ids.json"
  printf '%s' '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]},{"role":"assistant","content":null}],"max_completion_tokens":16,"chat_template_kwargs":{"enable_thinking":false,"x":[1,{"y":2}]}}' > "$out/corpus/chat.json"
  printf '%s' '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' > "$out/corpus/tokenize.json"
  printf '%s' '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": [1, 2.5]}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"array"}}}}}],"tool_choice":"required","logprobs":true,"top_logprobs":2,"n":2}' > "$out/corpus/tools.json"
  printf '%s' '{"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]{2,4}(x|y)+$"},"b":{"anyOf":[{"type":"integer","minimum":0},{"enum":[1,"z",null]}]},"c":{"type":"array","items":{"$ref":"#/$defs/d"},"maxItems":3}},"required":["a"],"$defs":{"d":{"type":"boolean"}}}}}}' > "$out/corpus/schema.json"
  printf '%s' '{"prompt":"x","guided_regex":"(ab|c[d-f]*){1,3}\\d?","logprobs":3}' > "$out/corpus/regex.json"
  printf '%s' 'Sure<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><tool_call>\n<function=g>\n<parameter=p>\nv\n</parameter>\n</function>\n</tool_call>' > "$out/corpus/toolcall_text.txt"
  printf '%s' '{"tokens":[1,2,3]}' > "$out/corpus/detokenize.json"
fi

echo "fuzz.sh: running $bin for ${seconds}s" >&2
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# -rss_limit_mb bounds a single input's memory; -max_len keeps inputs small
# enough that headers, not data, are what gets explored.
"$bin" "$out/corpus" -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1
}

main "$@"

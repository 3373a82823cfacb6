#!/bin/bash
# The layer rules of docs/design_notes.md ("Serving layers", link order)
# checked on the sources; prints every violation and exits 1 if any.
#   1. a folder includes only folders below it in the link order
#      base, tensor, formats, kernels, kv, tokenizer, {chat, grammar}, model, runtime,
#      {server, quantize, train}, ptqr, cli   (those three do not include each other; ptqr uses
#      quantize and train);
#   2. runtime reads no JSON and no files (no nlohmann, <fstream>, <filesystem>);
#   3. kernels are invisible above model: runtime, server and cli include no
#      kernels/ header, and no server source reaches a kernels/, kv/, model/ or
#      formats/ header even through other headers (g++ -MM).
set -u
cd "$(dirname "$0")/.."
declare -A rank=([base]=0 [tensor]=1 [formats]=2 [kernels]=3 [kv]=4 [tokenizer]=5 [chat]=6 [grammar]=6 [model]=7
                 [runtime]=8 [server]=9 [quantize]=9 [train]=9 [ptqr]=10 [cli]=11)
bad=0
say() { echo "check_layers: $*"; bad=1; }
for dir in src/*/; do
  from=$(basename "$dir")
  [ -n "${rank[$from]+x}" ] || { say "src/$from is not in the layer list of this script"; continue; }
  while IFS=: read -r file line text; do
    to=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<< "$text")
    [ -n "${rank[$to]+x}" ] || { say "$file:$line includes an unknown folder: $text"; continue; }
    if [ "$to" != "$from" ] && { [ "${rank[$to]}" -ge "${rank[$from]}" ]; }; then
      say "$file:$line: $from may not include $to: $text"
    fi
    case "$from:$to" in runtime:kernels|server:kernels|cli:kernels) say "$file:$line: kernels are invisible above model: $text" ;; esac
  done < <(grep -rnE '^#include "[a-z_]+/' "$dir")
done
while IFS= read -r hit; do say "runtime reads no JSON or files: $hit"; done < \
  <(grep -nE '#include <(nlohmann/|fstream|filesystem)|std::ifstream|std::ofstream|fopen\(' src/runtime/* 2>/dev/null)
flags=$(pkg-config --cflags cpp-httplib 2>/dev/null)
for f in src/server/*.cc; do
  deps=$(${CXX:-g++} -std=c++20 -MM -Isrc $flags "$f") || { say "$f: g++ -MM failed"; continue; }
  for h in $(tr ' \\' '\n\n' <<< "$deps" | grep -E '^src/(kernels|kv|model|formats)/'); do
    say "$f reaches $h (through its includes)"
  done
done
[ $bad = 0 ] && echo "check_layers: ok"
exit $bad

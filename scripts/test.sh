#!/usr/bin/env bash
# Set-up, build, and every test CI runs: unit, golden and fuzz labels.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
scripts/fetch_models.sh smollm2   # the e2e tests run the real SmolLM2-135M (94 MB, cached)
ctest --test-dir build --output-on-failure -L 'unit|golden|e2e|fuzz' -j2
# The server's tests (bad input, load with mid-stream disconnects, KV back to
# zero) once more in an AddressSanitizer build of just that binary.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" >/dev/null
cmake --build build-asan --target server_unit_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build-asan/server_unit_tests

#!/usr/bin/env bash
# Set-up, build, and every test CI runs: unit, golden and fuzz labels.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
# The e2e tests run the real SmolLM2-135M (94 MB) and Qwen2.5-Coder-1.5B (1.1 GB), cached.
scripts/fetch_models.sh all
ctest --test-dir build --output-on-failure -L 'unit|golden|e2e|fuzz' -j2
# The server's tests (bad input, load with mid-stream disconnects, KV back to
# zero) once more in an AddressSanitizer build of just that binary.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" >/dev/null
cmake --build build-asan --target server_unit_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build-asan/server_unit_tests
# The threaded parts -- thread pool, engine (step loop, cancellation, the
# kernels' pool at 2 threads) and server (handlers, disconnects, the stress
# test) -- once more under ThreadSanitizer. The other runtime tests are
# single-threaded numerics and only cost time there.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build build-tsan --target base_unit_tests runtime_unit_tests server_unit_tests
# g++ 12's TSan runtime cannot place its shadow memory when the kernel
# randomises mmap with more than 28 bits ("FATAL: ThreadSanitizer: unexpected
# memory mapping"), so the binaries run without ASLR where setarch may turn it
# off (a container's seccomp policy may not allow that; then they run as is).
no_aslr=(); if setarch "$(uname -m)" -R true 2>/dev/null; then no_aslr=(setarch "$(uname -m)" -R); fi
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
"${no_aslr[@]}" build-tsan/base_unit_tests
"${no_aslr[@]}" build-tsan/runtime_unit_tests --gtest_filter='Engine.*'
"${no_aslr[@]}" build-tsan/server_unit_tests

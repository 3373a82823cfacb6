// The driver shared by the panel GEMMs of kernels/x86 (Q8_G128 / Q4_G128 and the GGUF block formats): a software
// prefetch helper, a compile-time table of micro-kernels micro<T, MB> (T tiles of one panel, MB activation rows), and the loop
// that runs each panel of [tile0, tile1) against the activation rows in blocks of up to MaxMB. Private to
// kernels/x86.
#pragma once
#include <xmmintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>

#include "base/error.h"
#include "kernels/quant_layout.h"

namespace blockspec {

// Software prefetch into L1 of [p, p + bytes) shifted kPrefetchAhead bytes ahead, issued at the start of a
// micro-kernel step that will read those bytes: it puts the whole step's lines in flight at once instead of
// one demand miss after another. Distances of 1 to 4 KiB measure the same, 8 KiB and more slower (lines evicted
// before use). The same lines kPrefetchAheadL2 bytes ahead go to L2 (_MM_HINT_T1), which covers the DRAM latency
// of a loaded host: 2-core Zen 4 EPYC whose read bandwidth swung between 28 and 48 GB/s, decode of
// Qwen2.5-Coder-1.5B Q4_K_M, `bench --prompt-len 64 --gen-len 64 --repeats 2`, 6 rounds interleaved with
// llama-bench tg64: L1 only 23.0 22.4 20.9 21.0 20.1 22.4 tok/s, with L2 at 8 KiB 25.2 24.3 23.3 23.9 23.6 25.4
// (+13%); 16 and 32 KiB 21.9-25.7 and 21.9-26.8 over 3 rounds, not clearly apart from 8. A prefetch past a
// buffer's end is harmless: prefetches never fault.
inline constexpr int64_t kPrefetchAhead = 2048;
inline constexpr int64_t kPrefetchAheadL2 = 8192;
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + o), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAheadL2 + o), _MM_HINT_T1);
  }
}

// Lines of a `bytes`-long step that each of `shares` equal prefetch shares covers, rounded up so that together they
// cover the step (the spread prefetch of the block GEMMs on Intel).
constexpr int64_t share_lines(int64_t bytes, int64_t shares) { return ((bytes + 63) / 64 + shares - 1) / shares; }

// Micro::template fn<T, MB> is the micro-kernel for T tiles and MB rows, an Fn.
template <class Fn, class Micro, int T, int... MB>
constexpr std::array<Fn, sizeof...(MB)> panel_row(std::integer_sequence<int, MB...>) {
  return {Micro::template fn<T, MB + 1>...};
}
template <class Fn, class Micro, int MaxMB, int... T>
constexpr std::array<std::array<Fn, MaxMB>, sizeof...(T)> panel_table(std::integer_sequence<int, T...>) {
  return {panel_row<Fn, Micro, T + 1>(std::make_integer_sequence<int, MaxMB>())...};
}

// table[T - 1][MB - 1](a, w, y, tile, m0, extra...) for every panel of tiles [tile0, tile1) and every block of
// rows. tile0 is a multiple of kQPanel; tile1 too, or w.n_tiles.
template <class Table, class Acts, class W, class... Extra>
inline void run_panels(const Table& table, const Acts& a, const W& w, float* y, int64_t tile0, int64_t tile1,
                       Extra... extra) {
  const int64_t max_mb = static_cast<int64_t>(table[0].size());
  BS_ASSERT(tile0 % kQPanel == 0 && (tile1 % kQPanel == 0 || tile1 == w.n_tiles), "tiles ", tile0, "..", tile1);
  for (int64_t tile = tile0; tile < tile1; tile += kQPanel) {
    const int64_t T = w.panel_tiles(tile);
    for (int64_t m0 = 0; m0 < a.M; m0 += max_mb) {
      const int64_t MB = std::min<int64_t>(max_mb, a.M - m0);
      table[T - 1][MB - 1](a, w, y, tile, m0, extra...);
    }
  }
}

// run_panels over a copy of each panel: unpack[T - 1](w, tile, copy) writes it (w.n_blocks * T * rec_bytes bytes,
// 64-byte aligned), then table[T - 1][MB - 1](a, w, y, tile, m0, extra..., copy) runs the blocks of rows on it.
template <class Table, class Unpack, class Acts, class W, class... Extra>
inline void run_unpacked_panels(const Table& table, const Unpack& unpack, int64_t rec_bytes, const Acts& a,
                                const W& w, float* y, int64_t tile0, int64_t tile1, Extra... extra) {
  const int64_t max_mb = static_cast<int64_t>(table[0].size());
  // Left unwritten (unpack writes all of it; zeroing it was a memset of ~0.7 MB per call and thread).
  const std::unique_ptr<uint8_t[]> buf(new uint8_t[w.n_blocks * kQPanel * rec_bytes + 64]);
  uint8_t* copy = buf.get() + (-reinterpret_cast<uintptr_t>(buf.get()) & 63);
  for (int64_t tile = tile0; tile < tile1; tile += kQPanel) {
    const int64_t T = w.panel_tiles(tile);
    unpack[T - 1](w, tile, copy);
    for (int64_t m0 = 0; m0 < a.M; m0 += max_mb)
      table[T - 1][std::min<int64_t>(max_mb, a.M - m0) - 1](a, w, y, tile, m0, extra..., copy);
  }
}

}  // namespace blockspec

// Measures this machine's memory read bandwidth the way a decode step reads
// weights: every thread streams its own slice of a buffer far larger than
// the caches. The bench reports decode speed as a fraction of this number.
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/thread_pool.h"

namespace blockspec {

struct BandwidthResult {
  double median_gb_s = 0;
  double best_gb_s = 0;
  int repeats = 0;
  size_t bytes = 0;
};

// Reads p[0, n) and folds the bytes into a value (so the reads must happen); n a multiple of 64, p 64-byte
// aligned. The caller passes the kernel its decode uses (KernelTable::read_stream), so the probe loads with the
// same ISA.
using ReadStreamFn = uint64_t (*)(const uint8_t* p, int64_t n);

// Reads a `bytes` buffer `repeats` times with all of pool's threads, each thread its own contiguous slice, with
// `read`. The buffer is freed before returning (reset_peak_rss() then forgets it).
BandwidthResult measure_read_bandwidth(ThreadPool& pool, ReadStreamFn read, size_t bytes, int repeats = 9);

// Size in bytes of this CPU's largest cache (sysfs, cpu0), 0 where unknown.
int64_t last_level_cache_bytes();

// Peak resident set size of this process in MiB (VmHWM of /proc/self/status; getrusage where that is absent).
double peak_rss_mb();
// Resets the peak to the current RSS (Linux: "5" to /proc/self/clear_refs); false where the kernel refuses.
bool reset_peak_rss();

}  // namespace blockspec

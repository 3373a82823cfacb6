// Measures this machine's memory read bandwidth the way a decode step reads
// weights: every thread streams its own slice of a buffer far larger than
// the caches. The bench reports decode speed as a fraction of this number.
#pragma once
#include <cstddef>

#include "base/thread_pool.h"

namespace blockspec {

struct BandwidthResult {
  double median_gb_s = 0;
  double best_gb_s = 0;
  int repeats = 0;
  size_t bytes = 0;
};

// Reads a `bytes` buffer `repeats` times with all of pool's threads.
BandwidthResult measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t(512) << 20, int repeats = 9);

// The same, run in a forked child process so the probe's buffer never
// counts in this process's peak RSS. Call it before starting any thread.
BandwidthResult measure_read_bandwidth_isolated(int n_threads, size_t bytes = size_t(512) << 20, int repeats = 9);

// Peak resident set size of this process in MiB (getrusage).
double peak_rss_mb();

}  // namespace blockspec

#include "base/memory_bandwidth.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/timer.h"

namespace blockspec {

namespace {
// Eight independent accumulators keep enough loads in flight to saturate
// the memory system; the XOR keeps the loop from being optimised away.
uint64_t read_slice(const uint64_t* p, size_t n) {
  uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] ^= p[i + j];
  for (; i < n; ++i) a[0] ^= p[i];
  return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}
}  // namespace

BandwidthResult measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  void* mem = std::aligned_alloc(64, n * sizeof(uint64_t));
  if (mem == nullptr) fail("out of memory allocating ", bytes, " bytes for the bandwidth probe");
  uint64_t* buf = static_cast<uint64_t*>(mem);
  // First touch from the threads that will read, so pages are resident.
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  });
  std::vector<double> gbs;
  std::vector<uint64_t> sink(pool.n_threads());
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    pool.parallel_for_grain(static_cast<int64_t>(n), 1024, [&](int64_t b, int64_t e) {
      uint64_t v = read_slice(buf + b, static_cast<size_t>(e - b));
      sink[static_cast<size_t>(b * static_cast<int64_t>(sink.size()) / static_cast<int64_t>(n))] ^= v;
    });
    gbs.push_back(static_cast<double>(n * sizeof(uint64_t)) / t.seconds() / 1e9);
  }
  uint64_t s = 0;
  for (uint64_t v : sink) s ^= v;
  asm volatile("" : : "r"(s));  // the reads must happen: their result is "used"
  std::free(mem);
  std::sort(gbs.begin(), gbs.end());
  BandwidthResult res;
  res.median_gb_s = gbs[gbs.size() / 2];
  res.best_gb_s = gbs.back();
  res.repeats = repeats;
  res.bytes = n * sizeof(uint64_t);
  return res;
}

BandwidthResult measure_read_bandwidth_isolated(int n_threads, size_t bytes, int repeats) {
  int fds[2];
  if (::pipe(fds) != 0) fail("bandwidth probe: pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) fail("bandwidth probe: fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    BandwidthResult r{};
    try {
      ThreadPool pool(n_threads);
      r = measure_read_bandwidth(pool, bytes, repeats);
    } catch (...) {
    }
    ssize_t w = ::write(fds[1], &r, sizeof r);
    ::_exit(w == static_cast<ssize_t>(sizeof r) ? 0 : 1);
  }
  ::close(fds[1]);
  BandwidthResult r{};
  ssize_t got = ::read(fds[0], &r, sizeof r);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got != static_cast<ssize_t>(sizeof r) || r.repeats == 0) fail("bandwidth probe: the child process failed");
  return r;
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace blockspec

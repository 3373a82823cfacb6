#include "base/memory_bandwidth.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/timer.h"

namespace blockspec {

BandwidthResult measure_read_bandwidth(ThreadPool& pool, ReadStreamFn read, size_t bytes, int repeats) {
  BS_ASSERT(read != nullptr && repeats >= 1, "bandwidth probe arguments");
  constexpr int64_t kLine = 64;
  const int64_t n_lines = static_cast<int64_t>(bytes) / kLine;
  void* mem = std::aligned_alloc(kLine, static_cast<size_t>(n_lines * kLine));
  if (mem == nullptr) fail("out of memory allocating ", bytes, " bytes for the bandwidth probe");
  uint8_t* buf = static_cast<uint8_t*>(mem);
  // First touch from the threads that will read, so pages are resident and local.
  pool.parallel_for(n_lines, [&](int64_t b, int64_t e) {
    for (int64_t i = b * kLine; i < e * kLine; ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  });
  std::vector<double> gbs;
  std::atomic<uint64_t> sink{0};
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    pool.parallel_for_grain(n_lines, 4096, [&](int64_t b, int64_t e) {
      sink.fetch_xor(read(buf + b * kLine, (e - b) * kLine), std::memory_order_relaxed);  // once per tile
    });
    gbs.push_back(static_cast<double>(n_lines * kLine) / t.seconds() / 1e9);
  }
  const uint64_t s = sink.load();
  asm volatile("" : : "r"(s));  // the reads must happen: their result is "used"
  std::free(mem);
  std::sort(gbs.begin(), gbs.end());
  BandwidthResult res;
  res.median_gb_s = gbs[gbs.size() / 2];
  res.best_gb_s = gbs.back();
  res.repeats = repeats;
  res.bytes = static_cast<size_t>(n_lines * kLine);
  return res;
}

int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string v;
    if (!(f >> v) || v.empty()) continue;
    char* end = nullptr;
    int64_t n = std::strtoll(v.c_str(), &end, 10);
    if (*end == 'K') n <<= 10;
    else if (*end == 'M') n <<= 20;
    best = std::max(best, n);
  }
  return best;
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace blockspec

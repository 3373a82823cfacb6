// Drafter training data on disk (issue 15, training.md §1, §8): one record
// per generated conversation -- its tokens (prompt + the target's greedy
// response), where the response starts, and the target's tapped hidden
// states of its first `rows` tokens, captured while the engine generated
// it. Records are appended to one file that training maps read-only.
//
// File: header {char magic[8] "BSDRDAT1", int64 n_taps, hidden, tap_bytes,
// 0, 0, 0, 0} (64 bytes; tap_bytes 0 or 4: f32 taps, 2: bf16 taps), then
// records {int64 tag 0x44524543, index, n_tokens, n_prompt, rows; int32
// tokens[n_tokens]; taps[rows, n_taps * hidden] in the header's dtype}.
// A record cut short (a killed run) is dropped by the next writer.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace blockspec {

struct DraftRecordView {
  int64_t index = 0;      // the prompt's line in the prompts file
  int64_t n_tokens = 0, n_prompt = 0, rows = 0;  // rows <= n_tokens: tokens with taps
  const int32_t* tokens = nullptr;  // [n_tokens]
  const float* taps = nullptr;      // [rows, n_taps * hidden], f32 files
  const uint16_t* taps_bf16 = nullptr;  // [rows, n_taps * hidden], bf16 files
};

enum class TapDType { kF32, kBF16 };
TapDType parse_tap_dtype(const std::string& s);  // "f32" | "bf16"; fails otherwise

// Appends taps [first, first + n) of r (either dtype) to out as f32.
void append_taps_f32(const DraftRecordView& r, int64_t width, int64_t first, int64_t n, std::vector<float>& out);

// Appends records (r.taps in f32, stored in the file's dtype); opening an
// existing file checks its header against (n_taps, hidden) and keeps its
// tap dtype, and truncates a partial last record. Only one writer may
// hold a file (PATH.lock, flock): a second one fails instead of truncating
// the first one's record in flight. Readers (DraftData) need no lock.
class DraftDataWriter {
 public:
  // dtype: for a new file; an existing one keeps its own (tap_dtype()).
  DraftDataWriter(const std::string& path, int64_t n_taps, int64_t hidden, TapDType dtype = TapDType::kF32);
  ~DraftDataWriter();
  DraftDataWriter(const DraftDataWriter&) = delete;
  DraftDataWriter& operator=(const DraftDataWriter&) = delete;
  // Prompt indices already in the file (for resuming), in file order.
  const std::vector<int64_t>& done() const { return done_; }
  int64_t tokens_written() const { return tokens_; }
  int64_t width() const { return width_; }  // n_taps * hidden
  TapDType tap_dtype() const { return dtype_; }
  void append(const DraftRecordView& r);  // flushed before it returns

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int lock_fd_ = -1;
  int64_t width_ = 0;
  TapDType dtype_ = TapDType::kF32;
  std::vector<uint16_t> bf16_;  // conversion buffer
  std::vector<int64_t> done_;
  int64_t tokens_ = 0;
};

// The whole file mapped read-only, with every complete record indexed.
class DraftData {
 public:
  explicit DraftData(const std::string& path);
  ~DraftData();
  DraftData(const DraftData&) = delete;
  DraftData& operator=(const DraftData&) = delete;
  int64_t n_taps() const { return n_taps_; }
  int64_t hidden() const { return hidden_; }
  TapDType tap_dtype() const { return dtype_; }
  const std::vector<DraftRecordView>& records() const { return recs_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
  int64_t n_taps_ = 0, hidden_ = 0;
  TapDType dtype_ = TapDType::kF32;
  std::vector<DraftRecordView> recs_;
};

}  // namespace blockspec

#include "train/draft_data.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"
#include "tensor/dtype.h"

namespace blockspec {

namespace {

constexpr char kMagic[8] = {'B', 'S', 'D', 'R', 'D', 'A', 'T', '1'};
constexpr int64_t kHeader = 64, kTag = 0x44524543;

struct RecHead {
  int64_t tag, index, n_tokens, n_prompt, rows;
};

// Walks the records of a mapped file: calls f(view, end offset) for every
// complete one; returns the end offset of the last complete record.
template <class F>
size_t scan(const char* p, size_t size, const std::string& path, int64_t width, size_t tap_bytes, F f) {
  size_t off = kHeader;
  while (off + sizeof(RecHead) <= size) {
    RecHead h;
    std::memcpy(&h, p + off, sizeof h);
    if (h.tag != kTag || h.n_tokens < 1 || h.n_prompt < 1 || h.n_prompt > h.n_tokens || h.rows < 0 ||
        h.rows > h.n_tokens)
      fail(path, ": record at byte ", off, " is corrupt");
    const size_t end =
        off + sizeof h + 4 * static_cast<size_t>(h.n_tokens) + tap_bytes * static_cast<size_t>(h.rows * width);
    if (end > size) break;  // cut short
    DraftRecordView v{h.index, h.n_tokens, h.n_prompt, h.rows, reinterpret_cast<const int32_t*>(p + off + sizeof h)};
    const char* t = p + off + sizeof h + 4 * h.n_tokens;
    if (tap_bytes == 2) v.taps_bf16 = reinterpret_cast<const uint16_t*>(t);
    else v.taps = reinterpret_cast<const float*>(t);
    f(v);
    off = end;
  }
  return off;
}

void read_header(const char* p, size_t size, const std::string& path, int64_t& n_taps, int64_t& hidden,
                 TapDType& dtype) {
  if (size < static_cast<size_t>(kHeader) || std::memcmp(p, kMagic, 8) != 0)
    fail(path, ": not a blockspec drafter data file (bad magic)");
  int64_t tap_bytes = 0;
  std::memcpy(&n_taps, p + 8, 8);
  std::memcpy(&hidden, p + 16, 8);
  std::memcpy(&tap_bytes, p + 24, 8);
  if (n_taps < 1 || n_taps > 64 || hidden < 1 || hidden > (1 << 20)) fail(path, ": bad header (taps ", n_taps, ", hidden ", hidden, ")");
  if (tap_bytes != 0 && tap_bytes != 4 && tap_bytes != 2) fail(path, ": bad header (tap bytes ", tap_bytes, ")");
  dtype = tap_bytes == 2 ? TapDType::kBF16 : TapDType::kF32;
}

size_t tap_bytes(TapDType d) { return d == TapDType::kBF16 ? 2 : 4; }

}  // namespace

TapDType parse_tap_dtype(const std::string& s) {
  if (s == "f32") return TapDType::kF32;
  if (s == "bf16") return TapDType::kBF16;
  fail("tap dtype: '", s, "' is not f32 or bf16");
}

void append_taps_f32(const DraftRecordView& r, int64_t width, int64_t first, int64_t n, std::vector<float>& out) {
  if (r.taps != nullptr) {
    out.insert(out.end(), r.taps + first * width, r.taps + (first + n) * width);
    return;
  }
  const uint16_t* t = r.taps_bf16 + first * width;
  for (int64_t i = 0; i < n * width; ++i) out.push_back(bf16_to_f32(t[i]));
}

DraftDataWriter::DraftDataWriter(const std::string& path, int64_t n_taps, int64_t hidden, TapDType dtype)
    : path_(path), width_(n_taps * hidden), dtype_(dtype) {
  // One writer per file: a second one would truncate the first one's
  // record in flight. The lock is held until the writer closes.
  lock_fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  if (lock_fd_ < 0) fail(path, ".lock: cannot create");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    fail(path, ": another process is writing this data file (", path, ".lock is held)");
  }
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && st.st_size > 0) {
    size_t keep = 0;
    {
      DraftData d(path);  // validates the header
      if (d.n_taps() != n_taps || d.hidden() != hidden)
        fail(path, ": holds data for ", d.n_taps(), " taps x ", d.hidden(), ", this run captures ", n_taps, " x ",
             hidden, "; use another output directory");
      dtype_ = d.tap_dtype();
      keep = kHeader;
      for (const DraftRecordView& r : d.records()) {
        done_.push_back(r.index);
        tokens_ += r.n_tokens;
        keep += sizeof(RecHead) + 4 * static_cast<size_t>(r.n_tokens) + tap_bytes(dtype_) * static_cast<size_t>(r.rows * width_);
      }
    }
    if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) fail(path, ": cannot truncate a partial record");
    f_ = std::fopen(path.c_str(), "ab");
  } else {
    f_ = std::fopen(path.c_str(), "wb");
    if (f_ != nullptr) {
      char h[kHeader] = {};
      std::memcpy(h, kMagic, 8);
      std::memcpy(h + 8, &n_taps, 8);
      std::memcpy(h + 16, &hidden, 8);
      const int64_t tb = static_cast<int64_t>(tap_bytes(dtype_));
      std::memcpy(h + 24, &tb, 8);
      std::fwrite(h, 1, kHeader, f_);
    }
  }
  if (f_ == nullptr) fail(path, ": cannot open for writing");
}

DraftDataWriter::~DraftDataWriter() {
  if (f_ != nullptr) std::fclose(f_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void DraftDataWriter::append(const DraftRecordView& r) {
  const RecHead h{kTag, r.index, r.n_tokens, r.n_prompt, r.rows};
  bool ok = std::fwrite(&h, sizeof h, 1, f_) == 1;
  ok = ok && std::fwrite(r.tokens, 4, r.n_tokens, f_) == static_cast<size_t>(r.n_tokens);
  const size_t nt = static_cast<size_t>(r.rows * width_);
  if (dtype_ == TapDType::kBF16) {
    bf16_.resize(nt);
    for (size_t i = 0; i < nt; ++i) bf16_[i] = f32_to_bf16(r.taps[i]);
    ok = ok && std::fwrite(bf16_.data(), 2, nt, f_) == nt;
  } else {
    ok = ok && std::fwrite(r.taps, 4, nt, f_) == nt;
  }
  ok = ok && std::fflush(f_) == 0;
  if (!ok) fail(path_, ": write failed (disk full?)");
  done_.push_back(r.index);
  tokens_ += r.n_tokens;
}

DraftData::DraftData(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, ": cannot open drafter data");
  struct stat st{};
  ::fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) map_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) map_ = nullptr;
  if (map_ == nullptr) fail(path, ": cannot map drafter data (", size_, " bytes)");
  const char* p = static_cast<const char*>(map_);
  read_header(p, size_, path, n_taps_, hidden_, dtype_);
  scan(p, size_, path, n_taps_ * hidden_, tap_bytes(dtype_), [&](const DraftRecordView& v) { recs_.push_back(v); });
}

DraftData::~DraftData() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

}  // namespace blockspec

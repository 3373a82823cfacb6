// Read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace blockspec {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops the resident pages of [offset, offset+len) (rounded inward to
  // whole pages) from this process: a loader that converted a tensor calls
  // it so the source bytes stop counting in RSS. Reading them again simply
  // faults them back in from the file.
  void release(size_t offset, size_t len) const;

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Whole file into a string (small text files: config.json, tokenizer.json).
std::string read_text_file(const std::string& path);

}  // namespace blockspec

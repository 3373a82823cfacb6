// Tensor: a typed, shaped view over bytes it may or may not own. Row-major,
// last dimension contiguous. Owned storage is 64-byte aligned.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace blockspec {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"
// Bytes for numel elements of dtype t (rounded up to whole bytes).
size_t dtype_nbytes(DType t, int64_t numel);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zeroed, aligned, owned storage.
  Tensor(DType dtype, Shape shape);
  // The same storage with only the 64-byte tail past the data zeroed, for a caller that writes every byte of the
  // data itself (from several threads, so that the first touch of the pages, the kernel's zeroing of them, is
  // shared).
  static Tensor uninitialized(DType dtype, Shape shape);
  // Non-owning view; `keep` (optional) keeps the backing memory alive.
  static Tensor view(DType dtype, Shape shape, const void* data,
                     std::shared_ptr<const void> keep = nullptr);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return data_ == nullptr ? 0 : dtype_nbytes(dtype_, numel()); }
  bool empty() const { return data_ == nullptr; }  // default-constructed: no storage

  const void* data() const { return data_; }
  void* mutable_data();  // only for owned tensors
  template <class T> const T* ptr() const { return static_cast<const T*>(data_); }
  template <class T> T* mutable_ptr() { return static_cast<T*>(mutable_data()); }

 private:
  Tensor(DType dtype, Shape shape, bool zero);
  DType dtype_ = DType::kF32;
  Shape shape_;
  const void* data_ = nullptr;
  bool owned_ = false;
  std::shared_ptr<const void> keep_;
};

// Copies any float-ish tensor (F32, BF16, F16) into an owned F32 tensor.
Tensor to_f32(const Tensor& t);

}  // namespace blockspec

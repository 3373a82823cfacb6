#include "tensor/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/error.h"

namespace blockspec {

namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugeTensorBytes = size_t{4} << 20;
}  // namespace

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

size_t dtype_nbytes(DType t, int64_t numel) {
  return static_cast<size_t>((numel * dtype_bits(t) + 7) / 8);
}

Tensor::Tensor(DType dtype, Shape shape) : Tensor(dtype, std::move(shape), true) {}

Tensor Tensor::uninitialized(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape), false); }

Tensor::Tensor(DType dtype, Shape shape, bool zero) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) BS_ASSERT(d >= 0, "negative dimension in ", shape_str(shape_));
  size_t n = dtype_nbytes(dtype_, shape_numel(shape_));
  // Tensors of 4 MiB and more (weights, KV pools) sit on 2 MiB pages where the kernel grants them (THP in
  // "madvise" mode, the Debian default, only backs regions that ask): decode streams every weight once per
  // token, and on 4 KiB pages that is a TLB miss per 4 KiB read.
  const bool huge = n >= kHugeTensorBytes;
  const size_t align = huge ? kHugePageBytes : 64;
  size_t alloc = (n + align - 1) / align * align;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(align, alloc);
  if (p == nullptr) fail("out of memory allocating ", alloc, " bytes for tensor ", shape_str(shape_));
  if (huge) ::madvise(p, alloc, MADV_HUGEPAGE);  // advisory: without THP the pages stay 4 KiB
  // Zero the data (unless the caller writes it) and its 64-byte tail only: the rest of the last 2 MiB is touched
  // only if THP backs it anyway.
  const size_t end = std::min(alloc, std::max<size_t>((n + 63) / 64 * 64, 64)), from = zero ? 0 : std::min(n, end);
  std::memset(static_cast<uint8_t*>(p) + from, 0, end - from);
  keep_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  data_ = p;
  owned_ = true;
}

Tensor Tensor::view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> keep) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.keep_ = std::move(keep);
  return t;
}

void* Tensor::mutable_data() {
  BS_ASSERT(owned_, "mutable access to a non-owned tensor view");
  return const_cast<void*>(data_);
}

Tensor to_f32(const Tensor& t) {
  Tensor out(DType::kF32, t.shape());
  float* o = out.mutable_ptr<float>();
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32: std::memcpy(o, t.data(), n * 4); break;
    case DType::kBF16: {
      const uint16_t* s = t.ptr<uint16_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::kF16: {
      const uint16_t* s = t.ptr<uint16_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(s[i]);
      break;
    }
    default: fail("cannot convert dtype ", dtype_name(t.dtype()), " to F32");
  }
  return out;
}

}  // namespace blockspec

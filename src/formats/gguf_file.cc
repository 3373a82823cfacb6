// GgufFile: the mapping, the parsed header, and typed lookups whose errors
// name the file, the key and the expected vs found type.
#include <cstring>
#include <map>

#include "base/error.h"
#include "formats/gguf.h"

namespace blockspec {

struct GgufFile::Impl {
  MappedFile file;
  GgufHeader header;
  std::map<std::string, const GgufValue*> kv;         // into header.kv
  std::map<std::string, const GgufTensorInfo*> tensors;  // into header.tensors
};

namespace {

// Integer value of a scalar of any integer type; nullopt if it does not fit
// int64 (a uint64 above INT64_MAX).
std::optional<int64_t> int_of(GgufType t, uint64_t bits) {
  switch (t) {
    case GgufType::kU8: case GgufType::kU16: case GgufType::kU32: return static_cast<int64_t>(bits);
    case GgufType::kI8: return static_cast<int8_t>(bits);
    case GgufType::kI16: return static_cast<int16_t>(bits);
    case GgufType::kI32: return static_cast<int32_t>(bits);
    case GgufType::kI64: return static_cast<int64_t>(bits);
    case GgufType::kU64:
      if (bits > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(bits);
    default: return std::nullopt;
  }
}

double float_of(GgufType t, uint64_t bits) {
  if (t == GgufType::kF32) {
    uint32_t u = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

uint64_t load_le(const uint8_t* p, size_t w) {
  uint64_t v = 0;
  for (size_t i = 0; i < w; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

size_t width_of(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    default: return 8;
  }
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : impl_(std::make_shared<Impl>()) {
  impl_->file = MappedFile(path);
  impl_->header = parse_gguf_header(impl_->file.data(), impl_->file.size(), path);
  for (const auto& [k, v] : impl_->header.kv) impl_->kv[k] = &v;
  for (const auto& t : impl_->header.tensors) impl_->tensors[t.name] = &t;
}

const std::string& GgufFile::path() const { return impl_->file.path(); }
const GgufHeader& GgufFile::header() const { return impl_->header; }

bool GgufFile::has(const std::string& key) const { return impl_->kv.count(key) != 0; }

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = impl_->kv.find(key);
  return it == impl_->kv.end() ? nullptr : it->second;
}

const GgufValue& GgufFile::value(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(path(), ": metadata key \"", key, "\" missing");
  return *v;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = value(key);
  if (!v.is_int()) fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected an integer");
  auto i = int_of(v.type, v.bits);
  if (!i) fail(path(), ": metadata key \"", key, "\" = ", v.bits, " does not fit int64");
  return *i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = value(key);
  if (!v.is_float())
    fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected float32 or float64");
  return float_of(v.type, v.bits);
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::kBool) fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected bool");
  return v.bits != 0;
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::kString)
    fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected string");
  return v.str;
}

const std::vector<std::string>& GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::kArray || v.elem_type != GgufType::kString)
    fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected array[string]");
  return v.strs;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = value(key);
  GgufValue probe;
  probe.type = v.elem_type;
  if (v.type != GgufType::kArray || !probe.is_int())
    fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected an array of integers");
  size_t w = width_of(v.elem_type);
  std::vector<int64_t> out(v.n_elems);
  for (uint64_t i = 0; i < v.n_elems; ++i) {
    auto x = int_of(v.elem_type, load_le(v.raw.data() + i * w, w));
    if (!x) fail(path(), ": metadata key \"", key, "\" element ", i, " does not fit int64");
    out[i] = *x;
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::kArray || (v.elem_type != GgufType::kF32 && v.elem_type != GgufType::kF64))
    fail(path(), ": metadata key \"", key, "\" has type ", v.type_str(), ", expected array[float32]");
  size_t w = width_of(v.elem_type);
  std::vector<double> out(v.n_elems);
  for (uint64_t i = 0; i < v.n_elems; ++i) out[i] = float_of(v.elem_type, load_le(v.raw.data() + i * w, w));
  return out;
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_int(key);
}
std::optional<double> GgufFile::find_float(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}
std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

bool GgufFile::has_tensor(const std::string& name) const { return impl_->tensors.count(name) != 0; }

const GgufTensorInfo& GgufFile::tensor_info(const std::string& name) const {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end())
    fail(path(), ": tensor \"", name, "\" not found (the file has ", impl_->tensors.size(), " tensors)");
  return *it->second;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  return impl_->file.data() + impl_->header.data_offset + t.offset;
}

const uint8_t* GgufFile::tensor_data(const std::string& name) const { return tensor_data(tensor_info(name)); }

void GgufFile::release_tensor_pages(const GgufTensorInfo& t) const {
  impl_->file.release(impl_->header.data_offset + t.offset, t.nbytes);
}

}  // namespace blockspec

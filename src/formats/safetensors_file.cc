// SafetensorsFile (one mmapped, validated file) and SafetensorsCheckpoint (a
// single file or transformers-style shards behind model.safetensors.index.json).
//
// Sharding decisions, matching what transformers' loader does where it has a
// rule, and refusing where it would load something ambiguous:
//   - a directory holding model.safetensors is read as that single file even if
//     an index is also present (transformers checks the single file first);
//   - a weight_map entry naming a shard file that does not exist, or a tensor
//     its shard does not hold, is an error;
//   - a tensor present in a shard but absent from weight_map is accepted and
//     served from that shard (transformers loads every tensor of every listed
//     shard), unless it then appears in two shards;
//   - a tensor present in two shards is an error naming both;
//   - only shards named in weight_map are opened; other files are ignored;
//   - shard names must stay inside the index's directory (no "..", no "/x").
#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "base/error.h"
#include "formats/safetensors.h"

namespace blockspec {

namespace fs = std::filesystem;

struct SafetensorsFile::Impl {
  MappedFile file;
  SafetensorsHeader header;
  std::unordered_map<std::string, size_t> by_name;  // name -> header.entries index
};

SafetensorsFile::SafetensorsFile(const std::string& path) : impl_(std::make_shared<Impl>()) {
  impl_->file = MappedFile(path);
  impl_->header = parse_safetensors_header(impl_->file.data(), impl_->file.size(), path);
  const auto& entries = impl_->header.entries;
  impl_->by_name.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) impl_->by_name.emplace(entries[i].name, i);
}

const std::string& SafetensorsFile::path() const { return impl_->file.path(); }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->header.metadata; }
const std::vector<SafetensorsEntry>& SafetensorsFile::entries() const { return impl_->header.entries; }
bool SafetensorsFile::has(const std::string& name) const { return impl_->by_name.count(name) != 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end())
    fail(path(), ": no tensor \"", name, "\" (the file holds ", impl_->header.entries.size(),
         " tensors; list them with `blockspec inspect`)");
  return impl_->header.entries[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const uint8_t* p = impl_->file.data() + 8 + impl_->header.header_len + e.begin;
  // Aliasing shared_ptr: the view keeps the whole mapping (Impl) alive.
  return Tensor::view(e.dtype, e.shape, p, std::shared_ptr<const void>(impl_, p));
}

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A shard name must be a relative path that stays inside the index directory.
void check_shard_name(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  fs::path p(shard);
  bool bad = shard.empty() || p.is_absolute();
  for (const auto& part : p) bad = bad || part == "..";
  if (bad)
    fail(index_path, ": weight_map maps tensor \"", tensor, "\" to shard \"", shard,
         "\"; expected a file name relative to the index's directory");
}

}  // namespace

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  std::string single, index;
  if (fs::is_directory(path, ec)) {
    fs::path dir(path);
    if (fs::exists(dir / "model.safetensors", ec)) {
      single = (dir / "model.safetensors").string();
    } else if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      index = (dir / "model.safetensors.index.json").string();
    } else {
      fail(path, ": directory has neither model.safetensors nor model.safetensors.index.json; "
                 "pass the checkpoint directory, a .safetensors file or an index .json");
    }
  } else if (ends_with(path, ".json")) {
    index = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    files_.emplace_back(single);
    for (const auto& e : files_[0].entries()) index_.emplace(e.name, 0);
    return;
  }

  const SafetensorsIndex idx = parse_safetensors_index(read_text_file(index), index);
  if (idx.weight_map.empty()) fail(index, ": weight_map is empty; expected tensor name -> shard file entries");
  std::map<std::string, size_t> shard_ids;  // shard file name -> files_ index, in name order
  for (const auto& [tensor, shard] : idx.weight_map) {
    check_shard_name(index, tensor, shard);
    shard_ids.emplace(shard, 0);
  }
  const fs::path dir = fs::path(index).parent_path();
  for (auto& kv : shard_ids) {
    const std::string& shard = kv.first;
    const fs::path p = dir / shard;
    if (!fs::is_regular_file(p, ec)) {
      auto it = std::find_if(idx.weight_map.begin(), idx.weight_map.end(),
                             [&](const auto& tv) { return tv.second == shard; });
      fail(index, ": weight_map maps tensor \"", it->first, "\" to shard \"", shard, "\" but ", p.string(),
           " does not exist (incomplete download?)");
    }
    kv.second = files_.size();
    files_.emplace_back(p.string());
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    for (const auto& e : files_[i].entries()) {
      auto [it, inserted] = index_.emplace(e.name, i);
      if (!inserted)
        fail(index, ": tensor \"", e.name, "\" is stored in two shards, ", files_[it->second].path(), " and ",
             files_[i].path(), "; a tensor must live in exactly one shard");
    }
  }
  for (const auto& [tensor, shard] : idx.weight_map) {
    const SafetensorsFile& f = files_[shard_ids.at(shard)];
    if (f.has(tensor)) continue;
    auto it = index_.find(tensor);
    fail(index, ": weight_map maps tensor \"", tensor, "\" to shard \"", shard, "\" but ", f.path(),
         " does not hold it",
         it == index_.end() ? std::string(" (no listed shard does)")
                            : str_cat(" (it is in ", files_[it->second].path(), ")"));
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, _] : index_) out.push_back(name);
  return out;
}

bool SafetensorsCheckpoint::has(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    fail(path_, ": checkpoint has no tensor \"", name, "\" (", index_.size(),
         " tensors; list them with `blockspec inspect`)");
  return files_[it->second].entry(name);
}

Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  entry(name);  // throws with the checkpoint path if missing
  return files_[index_.at(name)].tensor(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  entry(name);
  return files_[index_.at(name)].path();
}

uint64_t SafetensorsCheckpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_)
    for (const auto& e : f.entries()) n += e.end - e.begin;
  return n;
}

}  // namespace blockspec

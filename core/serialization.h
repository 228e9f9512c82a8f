#pragma once
// Checkpoints in the safetensors layout: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}} padded with spaces to a
// multiple of 8, then every tensor's raw little-endian bytes in header order.
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace flow {

// An ordered name -> Tensor map (insertion order, like PyTorch's OrderedDict) plus string
// metadata for non-tensor state (train step, optimizer hyper-parameters).
class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;
  // Replaces the value of an existing name in place, else appends.
  void insert(const std::string& name, const Tensor& tensor);
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  void erase(const std::string& name);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Crash-safe: writes `<path>.tmp`, fsyncs it, renames it over `path` and fsyncs the directory
// (core/atomic_file.h), so a process killed at any moment leaves the old or the new checkpoint.
// Tensors on any device are written from CPU copies. Global tensors are written as the logical
// tensors they are (gathered), so a checkpoint loads on any number of ranks or in one process:
// every rank holding a piece calls save (it is collective), the lowest of them writes, and save
// returns on each of them once the file is complete.
void save(const StateDict& state, const std::string& path);
// Reads CPU tensors in the file's header order (the file is memory-mapped, and read through
// load_bytes). A missing, truncated or malformed file throws
// flow::Error("[load] <path>: <what is wrong>").
StateDict load(const std::string& path);
// Parses a safetensors image held in memory; `source` names it in errors. Rejects, as the format
// does: a header that is not a JSON object or names a key twice, unknown dtypes, shapes whose byte
// count overflows or differs from data_offsets, offsets past the data, overlapping or leaving a
// hole, trailing bytes, and BOOL bytes other than 0 and 1. Tensors may be in any order in the data.
StateDict load_bytes(std::string_view bytes, const std::string& source);

}  // namespace flow

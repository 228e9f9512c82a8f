#include "core/serialization.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/atomic_file.h"
#include "core/bool_bytes.h"
#include "core/comm/process_group.h"
#include "core/ops/all.h"

namespace flow {
namespace {

using Json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;

const std::map<DType, std::string>& dtype_codes() {
  static const std::map<DType, std::string> codes = {
      {kBool, "BOOL"}, {kUInt8, "U8"},   {kInt8, "I8"},      {kInt32, "I32"},    {kInt64, "I64"},
      {kFloat16, "F16"}, {kBFloat16, "BF16"}, {kFloat32, "F32"}, {kFloat64, "F64"},
      {kInt16, "I16"},   {kUInt16, "U16"},    {kUInt32, "U32"},   {kUInt64, "U64"}};
  return codes;
}

// The JSON header; a key named twice in one object is an error (the format forbids it, and the
// parser would silently keep one of the two values).
template <typename Bad>
Json parse_header(std::string_view text, const Bad& bad) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto track_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, track_keys);
  } catch (const std::exception& e) {
    bad("header is not valid JSON (", e.what(), ")");
  }
  if (!duplicate.empty()) bad("header names the key '", duplicate, "' twice in one object");
  if (!header.is_object()) bad("header is not a JSON object");
  return header;
}

}  // namespace

void StateDict::insert(const std::string& name, const Tensor& tensor) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    entries_[it->second].second = tensor;
    return;
  }
  index_[name] = entries_.size();
  entries_.emplace_back(name, tensor);
}

const Tensor& StateDict::at(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("state_dict", "no entry named '", name, "'");
  return entries_[it->second].second;
}

void StateDict::erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].first] = i;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : entries_) names.push_back(name);
  return names;
}

void save(const StateDict& state, const std::string& path) {
  Json header = Json::object();
  std::vector<Tensor> blobs;
  uint64_t offset = 0;
  // Ranks holding pieces of global tensors; the lowest writes, each tensor gathered to it.
  std::set<int64_t> holders;
  for (const auto& [name, tensor] : state) {
    if (tensor.is_global()) holders.insert(tensor.placement().ranks().begin(), tensor.placement().ranks().end());
  }
  const distributed::Ranks ranks(holders.begin(), holders.end());
  const bool writes = ranks.empty() || distributed::get_rank() == ranks.front();
  for (const auto& [name, tensor] : state) {
    if (name == "__metadata__") fail("save", "'__metadata__' is reserved and cannot name a tensor");
    Tensor whole = tensor.detach();
    if (whole.is_global()) {
      const Placement writer(whole.placement().device_type(), std::vector<int64_t>{ranks.front()});
      whole = whole.to_global(writer, {Sbp::broadcast()}).to_local();
    }
    if (!writes) continue;
    const Tensor host = whole.cpu().contiguous();
    const uint64_t bytes = static_cast<uint64_t>(host.numel()) * itemsize(host.dtype());
    header[name] = {{"dtype", dtype_codes().at(host.dtype())}, {"shape", host.shape().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    blobs.push_back(host);
  }
  if (!state.metadata().empty()) {
    Json metadata = Json::object();
    for (const auto& [key, value] : state.metadata()) metadata[key] = value;
    header["__metadata__"] = metadata;
  }
  if (!writes) {
    distributed::process_group("save").barrier(ranks);
    return;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  AtomicFile out(path, "save");
  const uint64_t length = text.size();
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(length_bytes, 8);
  out.write(text.data(), text.size());
  for (const Tensor& blob : blobs) out.write(blob.data_ptr(), static_cast<size_t>(blob.numel()) * itemsize(blob.dtype()));
  out.commit();
  if (!ranks.empty()) distributed::process_group("save").barrier(ranks);
}

StateDict load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("load", path, ": cannot open file");
  struct stat info {};
  const bool regular = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  if (!regular) {
    ::close(fd);
    fail("load", path, ": not a regular file");
  }
  const size_t size = static_cast<size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return load_bytes({}, path);
  }
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  if (mapped == MAP_FAILED) fail("load", path, ": cannot map the file: ", std::strerror(error));
  struct Unmap {
    void* data;
    size_t size;
    ~Unmap() { ::munmap(data, size); }
  } unmap{mapped, size};
  return load_bytes(std::string_view(static_cast<const char*>(mapped), size), path);
}

StateDict load_bytes(std::string_view bytes, const std::string& source) {
  auto bad = [&](const auto&... what) { fail("load", source, ": ", what...); };
  const uint64_t file_size = bytes.size();
  if (file_size < 8) bad("file is ", file_size, " bytes, too short for a safetensors header");
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (header_length > kMaxHeaderBytes) bad("header length ", header_length, " exceeds the ", kMaxHeaderBytes, "-byte limit");
  if (header_length > file_size - 8) bad("header length ", header_length, " runs past the end of the ", file_size, "-byte file");
  const Json header = parse_header(bytes.substr(8, header_length), bad);
  const uint64_t data_size = file_size - 8 - header_length;
  const char* data = bytes.data() + 8 + header_length;

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  StateDict state;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) bad("__metadata__ value of '", key, "' is not a string");
        state.metadata()[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      bad("tensor '", name, "' needs dtype, shape and data_offsets");
    }
    const Json& code = entry["dtype"];
    const auto known = std::find_if(dtype_codes().begin(), dtype_codes().end(),
                                    [&](const auto& pair) { return code.is_string() && code.get<std::string>() == pair.second; });
    if (known == dtype_codes().end()) bad("tensor '", name, "' has unknown dtype ", code.dump());
    const DType dtype = known->first;
    const Json& dims = entry["shape"];
    if (!dims.is_array()) bad("tensor '", name, "' shape is not an array");
    std::vector<int64_t> sizes;
    for (const Json& d : dims) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        bad("tensor '", name, "' has an invalid dimension ", d.dump());
      }
      sizes.push_back(d.get<int64_t>());
    }
    const Shape shape(sizes);
    uint64_t nbytes = 0;
    try {
      // Strides multiply the dims as if zeros were ones: that product must fit too.
      std::vector<int64_t> extents;
      for (int64_t size : sizes) extents.push_back(std::max<int64_t>(size, 1));
      (void)Shape(extents).nbytes(itemsize(dtype));
      nbytes = static_cast<uint64_t>(shape.nbytes(itemsize(dtype)));
    } catch (const Error&) {
      bad("tensor '", name, "' shape ", shape, " of ", dtype_name(dtype), " has more bytes than int64 can count");
    }
    const Json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      bad("tensor '", name, "' data_offsets must be two non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) bad("tensor '", name, "' data_offsets [", begin, ", ", end, "] are reversed");
    if (end > data_size) bad("tensor '", name, "' data_offsets end ", end, " is past the ", data_size, "-byte data area (truncated file?)");
    if (end - begin != nbytes) {
      bad("tensor '", name, "' has ", end - begin, " bytes but shape ", shape, " of ", dtype_name(dtype), " needs ", nbytes);
    }
    entries.push_back({name, dtype, shape, begin, end});
  }

  // The tensors must tile the data area exactly, in any order: no overlap (one byte read as two
  // tensors) and no hole (bytes no tensor owns).
  std::vector<const Entry*> by_offset;
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* entry : by_offset) {
    if (entry->begin < covered) {
      bad("tensor '", entry->name, "' data_offsets [", entry->begin, ", ", entry->end, "] overlap those of tensor '", previous->name, "'");
    }
    if (entry->begin > covered) bad("tensor '", entry->name, "' starts at ", entry->begin, " but the previous tensor ends at ", covered);
    covered = entry->end;
    previous = entry;
  }
  if (covered != data_size) bad(data_size - covered, " trailing bytes after the last tensor");

  for (const Entry& entry : entries) {
    const char* begin = data + entry.begin;
    const size_t nbytes = entry.end - entry.begin;
    if (entry.dtype == kBool) {
      if (const std::optional<int> invalid = find_non_boolean_byte({begin, nbytes})) {
        bad("tensor '", entry.name, "' of BOOL holds the byte ", *invalid, " (only 0 and 1 are booleans)");
      }
    }
    Tensor t = make_tensor(entry.shape, entry.dtype, kCPU);
    if (nbytes > 0) std::memcpy(t.data_ptr(), begin, nbytes);
    state.insert(entry.name, t);
  }
  return state;
}

}  // namespace flow

#include "core/serialization.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/functional.h"

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
  for (const auto& [name, tensor] : state) {
    if (name == "__metadata__") fail("save", "'__metadata__' is reserved and cannot name a tensor");
    const Tensor host = tensor.detach().cpu().contiguous();
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
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail("save", path, ": cannot open for writing");
    const uint64_t length = text.size();
    unsigned char length_bytes[8];
    for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(length >> (8 * i));
    out.write(reinterpret_cast<const char*>(length_bytes), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const Tensor& blob : blobs) {
      out.write(static_cast<const char*>(blob.data_ptr()), static_cast<std::streamsize>(blob.numel() * itemsize(blob.dtype())));
    }
    if (!out) fail("save", path, ": write failed");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail("save", path, ": cannot rename ", temporary, " into place");
}

StateDict load(const std::string& path) {
  auto bad = [&](const auto&... what) { fail("load", path, ": ", what...); };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) bad("cannot open file");
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) bad("file is ", file_size, " bytes, too short for a safetensors header");
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  if (header_length > kMaxHeaderBytes) bad("header length ", header_length, " exceeds the ", kMaxHeaderBytes, "-byte limit");
  if (header_length > file_size - 8) bad("header length ", header_length, " runs past the end of the ", file_size, "-byte file");
  std::string text(header_length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_length));
  Json header;
  try {
    header = Json::parse(text);
  } catch (const std::exception& e) {
    bad("header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) bad("header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_length;
  StateDict state;
  uint64_t expected_begin = 0;
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
    DType dtype = kFloat32;
    bool known = false;
    for (const auto& [d, c] : dtype_codes()) {
      if (code.is_string() && code.get<std::string>() == c) {
        dtype = d;
        known = true;
      }
    }
    if (!known) bad("tensor '", name, "' has unknown dtype ", code.dump());
    const Json& dims = entry["shape"];
    if (!dims.is_array()) bad("tensor '", name, "' shape is not an array");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const Json& d : dims) {
      if (!d.is_number_unsigned()) bad("tensor '", name, "' has an invalid dimension ", d.dump());
      const uint64_t size = d.get<uint64_t>();
      if (size != 0 && numel > (uint64_t{1} << 62) / size) bad("tensor '", name, "' shape overflows");
      numel *= size;
      shape.push_back(static_cast<int64_t>(size));
    }
    const Json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      bad("tensor '", name, "' data_offsets must be two non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) bad("tensor '", name, "' data_offsets [", begin, ", ", end, "] are reversed");
    if (end > data_size) bad("tensor '", name, "' data_offsets end ", end, " is past the ", data_size, "-byte data area (truncated file?)");
    if (end - begin != numel * itemsize(dtype)) {
      bad("tensor '", name, "' has ", end - begin, " bytes but shape ", Shape(shape), " of ", dtype_name(dtype), " needs ",
          numel * itemsize(dtype));
    }
    if (begin != expected_begin) bad("tensor '", name, "' starts at ", begin, " but the previous tensor ends at ", expected_begin);
    expected_begin = end;
    Tensor t = make_tensor(Shape(shape), dtype, kCPU);
    in.seekg(static_cast<std::streamoff>(8 + header_length + begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(end - begin));
    if (!in) bad("cannot read the data of tensor '", name, "'");
    state.insert(name, t);
  }
  if (expected_begin != data_size) bad(data_size - expected_begin, " trailing bytes after the last tensor");
  return state;
}

}  // namespace flow

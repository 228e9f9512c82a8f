#include "data/vision.h"

#include <zlib.h>

#include <filesystem>

#include "core/functional.h"

namespace flow::data {
namespace {

// The whole (decompressed) file; gzread reads raw files unchanged.
std::string read_file(const std::string& path, const std::string& dataset_name) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(dataset_name, path, ": cannot open file");
  std::string bytes;
  char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) bytes.append(buffer, static_cast<size_t>(n));
  int error = Z_OK;
  const char* message = gzerror(file, &error);
  const bool failed = n < 0 || (error != Z_OK && error != Z_STREAM_END);
  const std::string what = failed ? message : "";
  gzclose(file);
  if (failed) fail(dataset_name, path, ": corrupt or truncated gzip data (", what, ")");
  return bytes;
}

uint32_t big_endian(const std::string& bytes, size_t offset) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + 3]));
}

// `<root>/<stem>` or `<root>/<stem>.gz`, whichever exists.
std::string locate(const std::string& root, const std::string& stem, const std::string& dataset_name) {
  for (const std::string& candidate : {root + "/" + stem + ".gz", root + "/" + stem}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  fail(dataset_name, root + "/" + stem, "[.gz]: file not found");
}

}  // namespace

Tensor read_idx(const std::string& path, int expected_dims, const std::string& dataset_name) {
  const std::string bytes = read_file(path, dataset_name);
  if (bytes.size() < 4) fail(dataset_name, path, ": file is ", bytes.size(), " bytes, too short for an IDX header");
  const uint32_t magic = big_endian(bytes, 0);
  const uint32_t expected_magic = 0x0800u | static_cast<uint32_t>(expected_dims);  // unsigned byte data
  if (magic != expected_magic) fail(dataset_name, path, ": bad magic number ", magic, " (expected ", expected_magic, ")");
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  if (bytes.size() < header) fail(dataset_name, path, ": truncated header");
  std::vector<int64_t> dims;
  uint64_t count = 1;
  for (int d = 0; d < expected_dims; ++d) {
    dims.push_back(big_endian(bytes, 4 + 4 * static_cast<size_t>(d)));
    count *= static_cast<uint64_t>(dims.back());
  }
  if (bytes.size() - header != count) {
    fail(dataset_name, path, ": expected ", count, " data bytes for shape ", Shape(dims), ", found ", bytes.size() - header,
         " (truncated or corrupt file)");
  }
  return from_blob(bytes.data() + header, Shape(dims), kUInt8);
}

Tensor to_tensor(const Tensor& image) {
  if (image.dtype() != kUInt8) fail("ToTensor", "expected a uint8 image, got ", dtype_name(image.dtype()));
  if (image.dim() == 2) return image.unsqueeze(0).to(kFloat32) / 255.0;
  if (image.dim() == 3) return image.permute({2, 0, 1}).to(kFloat32) / 255.0;
  fail("ToTensor", "expected an image of shape (H,W) or (H,W,C), got ", image.shape());
}

Transform Normalize(std::vector<double> mean, std::vector<double> std) {
  if (mean.size() != std.size() || mean.empty()) fail("Normalize", "mean and std need the same, non-zero length");
  for (double s : std) {
    if (s == 0) fail("Normalize", "std evaluated to zero, leading to division by zero");
  }
  const Tensor m = tensor(mean).to(kFloat32).reshape({-1, 1, 1});
  const Tensor s = tensor(std).to(kFloat32).reshape({-1, 1, 1});
  return [m, s](const Tensor& x) {
    if (x.dim() != 3 || (x.size(0) != m.size(0) && m.size(0) != 1)) {
      fail("Normalize", "expected a (C,H,W) tensor with ", m.size(0), " channels, got ", x.shape());
    }
    return (x - m) / s;
  };
}

Transform Compose(std::vector<Transform> transforms) {
  return [transforms = std::move(transforms)](const Tensor& x) {
    Tensor y = x;
    for (const auto& t : transforms) y = t(y);
    return y;
  };
}

MNIST::MNIST(const std::string& root, bool train, Transform transform) : MNIST(root, train, std::move(transform), "MNIST") {}

MNIST::MNIST(const std::string& root, bool train, Transform transform, const std::string& dataset_name)
    : transform_(std::move(transform)) {
  const std::string prefix = train ? "train" : "t10k";
  images_ = read_idx(locate(root, prefix + "-images-idx3-ubyte", dataset_name), 3, dataset_name);
  const Tensor labels = read_idx(locate(root, prefix + "-labels-idx1-ubyte", dataset_name), 1, dataset_name);
  if (labels.size(0) != images_.size(0)) {
    fail(dataset_name, root, ": ", labels.size(0), " labels for ", images_.size(0), " images");
  }
  if (labels.numel() > 0 && max(labels).item<int64_t>() > 9) fail(dataset_name, root, ": label out of range 0..9");
  targets_ = labels.to(kInt64);
}

Example MNIST::get(int64_t index) const {
  if (index < 0 || index >= size()) fail("MNIST", "index ", index, " is out of range for ", size(), " examples");
  Tensor image = to_tensor(images_.select(0, index));
  if (transform_) image = transform_(image);
  return {image, targets_.select(0, index)};
}

FashionMNIST::FashionMNIST(const std::string& root, bool train, Transform transform)
    : MNIST(root, train, std::move(transform), "FashionMNIST") {}

}  // namespace flow::data

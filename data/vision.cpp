#include "data/vision.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "core/ops/all.h"
#include "core/random.h"

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

// The bytes from `offset` on as a uint8 tensor that keeps them alive: no copy of a data set.
Tensor owning_bytes(std::string bytes, size_t offset, const Shape& shape) {
  auto owned = std::make_shared<std::string>(std::move(bytes));
  return from_blob(owned->data() + offset, shape, [owned](void*) {}, kUInt8);
}

}  // namespace

Tensor read_idx(const std::string& path, int expected_dims, const std::string& dataset_name) {
  std::string bytes = read_file(path, dataset_name);
  if (bytes.size() < 4) fail(dataset_name, path, ": file is ", bytes.size(), " bytes, too short for an IDX header");
  const uint32_t magic = big_endian(bytes, 0);
  const uint32_t expected_magic = 0x0800u | static_cast<uint32_t>(expected_dims);  // unsigned byte data
  if (magic != expected_magic) fail(dataset_name, path, ": bad magic number ", magic, " (expected ", expected_magic, ")");
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  if (bytes.size() < header) fail(dataset_name, path, ": truncated header");
  std::vector<int64_t> dims;
  for (int d = 0; d < expected_dims; ++d) dims.push_back(big_endian(bytes, 4 + 4 * static_cast<size_t>(d)));
  // Three 32-bit dims can multiply past 64 bits; a wrapped count could match a small file. The
  // strides multiply the dims as if zeros were ones (a (0, 2^32-1, 2^32-1) file holds no bytes),
  // so that product must fit too.
  uint64_t count = 0;
  try {
    std::vector<int64_t> extents;
    for (int64_t d : dims) extents.push_back(std::max<int64_t>(d, 1));
    (void)Shape(extents).numel();
    count = static_cast<uint64_t>(Shape(dims).numel());
  } catch (const Error&) {
    fail(dataset_name, path, ": shape ", Shape(dims), " in the header has more elements than int64 can count");
  }
  if (bytes.size() - header != count) {
    fail(dataset_name, path, ": expected ", count, " data bytes for shape ", Shape(dims), ", found ", bytes.size() - header,
         " (truncated or corrupt file)");
  }
  return owning_bytes(std::move(bytes), header, Shape(dims));
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

Transform RandomCrop(int64_t size, int64_t padding, uint64_t seed) {
  FLOW_ARG_CHECK(size > 0 && padding >= 0, "RandomCrop", "size must be positive and padding non-negative, got ", size, " and ", padding);
  auto generator = std::make_shared<Generator>(seed);
  return [size, padding, generator](const Tensor& image) {
    if (image.dim() != 3) fail("RandomCrop", "expected a (C,H,W) tensor, got ", image.shape());
    Tensor padded = image;
    if (padding > 0) {
      padded = zeros({image.size(0), image.size(1) + 2 * padding, image.size(2) + 2 * padding}, image.dtype());
      padded.slice(1, padding, padding + image.size(1)).slice(2, padding, padding + image.size(2)).copy_(image);
    }
    const int64_t h = padded.size(1), w = padded.size(2);
    if (h < size || w < size) fail("RandomCrop", "crop size ", size, " is larger than the padded image ", padded.shape());
    auto [seed_value, offset] = generator->reserve(1);
    uint32_t words[4];
    Philox::block(seed_value, offset, words);
    const int64_t top = static_cast<int64_t>(words[0] % static_cast<uint32_t>(h - size + 1));
    const int64_t left = static_cast<int64_t>(words[1] % static_cast<uint32_t>(w - size + 1));
    return padded.slice(1, top, top + size).slice(2, left, left + size).contiguous();
  };
}

Transform RandomHorizontalFlip(double p, uint64_t seed) {
  FLOW_ARG_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip", "p must be in [0, 1], got ", p);
  auto generator = std::make_shared<Generator>(seed);
  return [p, generator](const Tensor& image) {
    if (image.dim() != 3) fail("RandomHorizontalFlip", "expected a (C,H,W) tensor, got ", image.shape());
    auto [seed_value, offset] = generator->reserve(1);
    uint32_t words[4];
    Philox::block(seed_value, offset, words);
    if (Philox::to_unit(words[0]) >= p) return image;
    const int64_t w = image.size(2);
    return index_select(image, 2, arange(w - 1, -1, -1));
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

namespace flow::data {

CIFAR10::CIFAR10(const std::string& root, bool train, Transform transform) : transform_(std::move(transform)) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back(root + "/data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back(root + "/test_batch.bin");
  }
  TensorList images, labels;
  for (const auto& path : files) {
    if (!std::filesystem::exists(path)) fail("CIFAR10", path, ": file not found");
    std::string bytes = read_file(path, "CIFAR10");
    if (bytes.empty() || bytes.size() % kRecord != 0) {
      fail("CIFAR10", path, ": ", bytes.size(), " bytes is not a whole number of ", kRecord, "-byte records (truncated or corrupt)");
    }
    const int64_t n = static_cast<int64_t>(bytes.size()) / kRecord;
    Tensor records = owning_bytes(std::move(bytes), 0, {n, kRecord});
    Tensor label = records.select(1, 0).to(kInt64);
    if (max(label).item<int64_t>() > 9) fail("CIFAR10", path, ": label out of range 0..9");
    labels.push_back(label);
    images.push_back(records.slice(1, 1, kRecord).reshape({n, 3, 32, 32}));
  }
  images_ = cat(images);
  targets_ = cat(labels);
}

Example CIFAR10::get(int64_t index) const {
  if (index < 0 || index >= size()) fail("CIFAR10", "index ", index, " is out of range for ", size(), " examples");
  Tensor image = images_.select(0, index).to(kFloat32) / 255.0;
  if (transform_) image = transform_(image);
  return {image, targets_.select(0, index)};
}

}  // namespace flow::data

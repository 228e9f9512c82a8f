#pragma once
// Vision datasets read from local files, and the transforms the quickstart uses.
#include <functional>
#include <string>

#include "data/dataset.h"

namespace flow::data {

using Transform = std::function<Tensor(const Tensor&)>;

// uint8 image (H,W) or (H,W,C) -> float32 (C,H,W) in [0, 1], like torchvision's ToTensor.
Tensor to_tensor(const Tensor& image);
// Per-channel (x - mean) / std on a (C,H,W) float tensor.
Transform Normalize(std::vector<double> mean, std::vector<double> std);
Transform Compose(std::vector<Transform> transforms);
// Pads (C,H,W) by `padding` zeros on every side, then crops a random (size, size) window.
// Each transform draws from its own generator seeded with `seed`, so runs are reproducible.
Transform RandomCrop(int64_t size, int64_t padding = 0, uint64_t seed = 0);
// Flips (C,H,W) along W with probability p.
Transform RandomHorizontalFlip(double p = 0.5, uint64_t seed = 0);

// MNIST-format (IDX) datasets: `<root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`.
// Items: data float32 (1,28,28) in [0, 1] (ToTensor) then `transform`; target int64 0-d.
class MNIST : public Dataset {
 public:
  MNIST(const std::string& root, bool train = true, Transform transform = nullptr);
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;
  const Tensor& images() const { return images_; }  // uint8 (N,28,28)
  const Tensor& targets() const { return targets_; }  // int64 (N)

 protected:
  MNIST(const std::string& root, bool train, Transform transform, const std::string& dataset_name);

 private:
  Tensor images_, targets_;
  Transform transform_;
};

// Fashion-MNIST; the root defaults to Debian's dataset-fashion-mnist package.
class FashionMNIST : public MNIST {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  explicit FashionMNIST(const std::string& root = kDefaultRoot, bool train = true, Transform transform = nullptr);
};

// CIFAR-10 binary batches under root: data_batch_1..5.bin (train) or test_batch.bin; each record
// is 1 label byte and 3072 bytes of a 3x32x32 image. Items: float32 (3,32,32) in [0, 1].
class CIFAR10 : public Dataset {
 public:
  CIFAR10(const std::string& root, bool train = true, Transform transform = nullptr);
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;

 private:
  Tensor images_, targets_;  // uint8 (N,3,32,32), int64 (N)
  Transform transform_;
};

// Reads an IDX file (gzip or raw): returns its uint8 contents shaped by the header's dims.
// Errors name the file: missing, truncated, bad magic, wrong element type.
Tensor read_idx(const std::string& path, int expected_dims, const std::string& dataset_name);

}  // namespace flow::data

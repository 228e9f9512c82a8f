#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "common/test_util.h"
#include "core/ops/all.h"
#include "data/dataloader.h"
#include "data/vision.h"

using flow::Shape;
using flow::Tensor;
namespace data = flow::data;

namespace {
std::shared_ptr<data::TensorDataset> numbers(int64_t n) {
  return std::make_shared<data::TensorDataset>(flow::arange(n).reshape({n, 1}).to(flow::kFloat32), flow::arange(n));
}

std::vector<int64_t> targets_of(data::DataLoader& loader) {
  std::vector<int64_t> all;
  for (const auto& batch : loader) {
    for (int64_t t : batch.target.tolist<int64_t>()) all.push_back(t);
  }
  return all;
}

class SlowDataset : public data::Dataset {
 public:
  explicit SlowDataset(int64_t fail_at = -1) : fail_at_(fail_at) {}
  int64_t size() const override { return 40; }
  data::Example get(int64_t index) const override {
    if (index == fail_at_) flow::fail("SlowDataset", "broken example ", index);
    std::this_thread::sleep_for(std::chrono::microseconds(((index * 7) % 5) * 200));
    return {flow::full({2}, index), flow::full({}, index)};
  }

 private:
  int64_t fail_at_;
};

void write_idx(const std::string& path, uint32_t magic, std::vector<uint32_t> dims, const std::string& payload, bool gzip) {
  std::string bytes;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<char>((v >> s) & 0xff));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  bytes += payload;
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
}

std::string idx_root(const std::string& name) {
  const std::string root = unique_temp_path("idx_" + name);
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  return root;
}
}  // namespace

TEST(DataLoader, SequentialBatchesAndDropLast) {
  data::DataLoader loader(numbers(10), data::DataLoaderOptions().batch_size(4));
  EXPECT_EQ(loader.size(), 3);
  std::vector<Shape> shapes;
  for (const auto& batch : loader) shapes.push_back(batch.data.shape());
  EXPECT_EQ(shapes, (std::vector<Shape>{{4, 1}, {4, 1}, {2, 1}}));
  EXPECT_EQ(targets_of(loader), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  data::DataLoader dropping(numbers(10), data::DataLoaderOptions().batch_size(4).drop_last(true));
  EXPECT_EQ(dropping.size(), 2);
  EXPECT_EQ(targets_of(dropping).size(), 8u);
}

TEST(DataLoader, ShuffleIsSeededPerEpochAndIndependentOfWorkers) {
  data::DataLoader a(numbers(50), data::DataLoaderOptions().batch_size(8).shuffle(true).seed(3));
  data::DataLoader b(numbers(50), data::DataLoaderOptions().batch_size(8).shuffle(true).seed(3).num_workers(3));
  const auto epoch0 = targets_of(a), epoch1 = targets_of(a);
  EXPECT_NE(epoch0, epoch1) << "each epoch reshuffles";
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), 50u);
  EXPECT_EQ(targets_of(b), epoch0);
  EXPECT_EQ(targets_of(b), epoch1);
}

TEST(DataLoader, WorkersDeliverInOrderPropagateErrorsAndStopEarly) {
  data::DataLoader loader(std::make_shared<SlowDataset>(), data::DataLoaderOptions().batch_size(3).num_workers(4));
  std::vector<int64_t> expected(40);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(targets_of(loader), expected);
  int seen = 0;
  for (const auto& batch : loader) {
    (void)batch;
    if (++seen == 2) break;  // leaving mid-epoch joins the in-flight loads
  }
  data::DataLoader failing(std::make_shared<SlowDataset>(20), data::DataLoaderOptions().batch_size(3).num_workers(2));
  EXPECT_THROW_MSG(targets_of(failing), "[SlowDataset] broken example 20");
}

namespace {
data::DistributedSampler replica(int64_t size, int64_t replicas, int64_t rank, data::DistributedSamplerOptions options = {}) {
  return data::DistributedSampler(size, options.num_replicas(replicas).rank(rank));
}
}  // namespace

TEST(Samplers, DistributedPartitionsAndPads) {
  const auto sequential = data::DistributedSamplerOptions().shuffle(false);
  EXPECT_EQ(replica(10, 3, 0, sequential).indices(0), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(replica(10, 3, 1, sequential).indices(0), (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(replica(10, 3, 2, sequential).indices(0), (std::vector<int64_t>{2, 5, 8, 1}));
  EXPECT_EQ(replica(10, 3, 2, sequential).num_samples(), 4);
  EXPECT_EQ(replica(10, 3, 2, data::DistributedSamplerOptions(sequential).drop_last(true)).indices(0),
            (std::vector<int64_t>{2, 5, 8}));
  // Fewer examples than replicas: the padding wraps around as often as needed.
  EXPECT_EQ(replica(2, 5, 4, sequential).indices(0), (std::vector<int64_t>{0}));
  EXPECT_EQ(replica(0, 2, 1, sequential).indices(0), (std::vector<int64_t>{}));
  EXPECT_THROW_MSG(replica(10, 2, 2), "[DistributedSampler] invalid rank 2");
  EXPECT_THROW_MSG(replica(10, 0, 0), "[DistributedSampler] num_replicas must be at least 1");
}

TEST(Samplers, DistributedShuffledReplicasCoverTheDatasetDisjointly) {
  for (int64_t replicas : {1, 2, 3, 4}) {
    std::vector<int64_t> all;
    for (int64_t rank = 0; rank < replicas; ++rank) {
      const auto mine = replica(12, replicas, rank, data::DistributedSamplerOptions().seed(5)).indices(3);
      EXPECT_EQ(static_cast<int64_t>(mine.size()), 12 / replicas);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> expected(12);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected) << replicas << " replicas";
  }
}

TEST(Samplers, DistributedOrderFollowsSeedAndEpochOnEveryRank) {
  // Ranks built apart agree on the shared order: rebuilding it from two ranks' shares gives the
  // same permutation as one replica with the same seed and epoch.
  const auto options = data::DistributedSamplerOptions().seed(42);
  auto whole = replica(20, 1, 0, options);
  auto r0 = replica(20, 2, 0, options), r1 = replica(20, 2, 1, options);
  r0.set_epoch(4);
  r1.set_epoch(4);
  whole.set_epoch(4);
  const auto a = r0.indices(0), b = r1.indices(99), order = whole.indices(7);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], order[2 * i]);
    EXPECT_EQ(b[i], order[2 * i + 1]);
  }
  auto next = replica(20, 1, 0, options);
  next.set_epoch(5);
  EXPECT_NE(next.indices(0), order);
  EXPECT_NE(replica(20, 1, 0, data::DistributedSamplerOptions().seed(43)).indices(4), order);
  // Without set_epoch the DataLoader's pass number is the epoch.
  EXPECT_EQ(replica(20, 1, 0, options).indices(4), order);
}

TEST(Samplers, DistributedDefaultsToTheProcessGroup) {
  const data::DistributedSampler sampler(7);
  EXPECT_EQ(sampler.num_replicas(), 1);
  EXPECT_EQ(sampler.rank(), 0);
  EXPECT_EQ(sampler.num_samples(), 7);
}

TEST(Datasets, IdxGzipAndRawAndErrors) {
  const std::string root = idx_root("ok");
  std::string pixels(2 * 2 * 3, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 20);
  write_idx(root + "/train-images-idx3-ubyte.gz", 0x803, {2, 2, 3}, pixels, true);
  write_idx(root + "/train-labels-idx1-ubyte", 0x801, {2}, std::string("\x07\x01", 2), false);
  data::MNIST mnist(root, true, data::Normalize({0.5}, {0.5}));
  ASSERT_EQ(mnist.size(), 2);
  auto example = mnist.get(1);
  EXPECT_EQ(example.data.shape(), (Shape{1, 2, 3}));
  EXPECT_NEAR(example.data.tolist<float>()[0], (120 / 255.0 - 0.5) / 0.5, 1e-6);
  EXPECT_EQ(example.target.item<int64_t>(), 1);

  const std::string bad = idx_root("bad");
  EXPECT_THROW_MSG(data::FashionMNIST{bad}, "train-images-idx3-ubyte[.gz]: file not found");
  write_idx(bad + "/train-images-idx3-ubyte", 0x801, {2, 2, 3}, pixels, false);
  write_idx(bad + "/train-labels-idx1-ubyte", 0x801, {2}, "ab", false);
  EXPECT_THROW_MSG(data::FashionMNIST{bad}, "bad magic number 2049 (expected 2051)");
  write_idx(bad + "/train-images-idx3-ubyte", 0x803, {2, 2, 3}, pixels.substr(0, 5), false);
  EXPECT_THROW_MSG(data::FashionMNIST{bad}, "expected 12 data bytes for shape (2,2,3), found 5");
  write_idx(bad + "/train-images-idx3-ubyte", 0x803, {2, 2, 3}, pixels, false);
  write_idx(bad + "/train-labels-idx1-ubyte", 0x801, {3}, "abc", false);
  EXPECT_THROW_MSG(data::FashionMNIST{bad}, "3 labels for 2 images");
  std::ofstream(bad + "/train-labels-idx1-ubyte", std::ios::binary) << "ab";
  EXPECT_THROW_MSG(data::FashionMNIST{bad}, "too short for an IDX header");
  // An empty file whose other dims would overflow the strides (found by fuzz_idx).
  write_idx(bad + "/train-images-idx3-ubyte", 0x803, {0, 0xffffffffu, 0xffffffffu}, "", false);
  EXPECT_THROW_MSG(data::FashionMNIST{bad}, "more elements than int64 can count");
}

TEST(Datasets, RealFashionMnist) {
  if (!std::filesystem::exists(data::FashionMNIST::kDefaultRoot)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  data::FashionMNIST train;
  data::FashionMNIST test(data::FashionMNIST::kDefaultRoot, false);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  auto example = train.get(0);
  EXPECT_EQ(example.data.shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(example.data.dtype(), flow::kFloat32);
  EXPECT_GE(flow::min(example.data).item<float>(), 0.f);
  EXPECT_LE(flow::max(example.data).item<float>(), 1.f);
  EXPECT_EQ(flow::max(train.targets()).item<int64_t>(), 9);
}

TEST(Transforms, RandomCropAndFlipAreSeededAndCorrect) {
  Tensor image = flow::arange(2 * 4 * 4, flow::kFloat32).reshape({2, 4, 4});
  auto crop = data::RandomCrop(4, 2, 7);
  auto again = data::RandomCrop(4, 2, 7);
  for (int i = 0; i < 5; ++i) {
    Tensor a = crop(image), b = again(image);
    EXPECT_EQ(a.shape(), (Shape{2, 4, 4}));
    EXPECT_EQ(a.tolist<float>(), b.tolist<float>());
  }
  EXPECT_EQ(data::RandomCrop(4, 0)(image).tolist<float>(), image.tolist<float>());
  auto flip = data::RandomHorizontalFlip(1.0);
  EXPECT_EQ(flip(image).select(0, 0).select(0, 0).tolist<float>(), (std::vector<float>{3, 2, 1, 0}));
  EXPECT_EQ(data::RandomHorizontalFlip(0.0)(image).tolist<float>(), image.tolist<float>());
  EXPECT_THROW_MSG(data::RandomCrop(9)(image), "[RandomCrop] crop size 9 is larger than the padded image (2,4,4)");
}

TEST(Datasets, Cifar10BinaryBatches) {
  const std::string root = idx_root("cifar");
  std::string records;
  for (int r = 0; r < 3; ++r) {
    records.push_back(static_cast<char>(r + 4));
    records += std::string(3072, static_cast<char>(r * 50));
  }
  std::ofstream(root + "/test_batch.bin", std::ios::binary).write(records.data(), static_cast<std::streamsize>(records.size()));
  data::CIFAR10 test(root, false);
  ASSERT_EQ(test.size(), 3);
  EXPECT_EQ(test.get(2).target.item<int64_t>(), 6);
  EXPECT_EQ(test.get(2).data.shape(), (Shape{3, 32, 32}));
  EXPECT_NEAR(test.get(1).data.tolist<float>()[100], 50 / 255.0, 1e-6);
  std::ofstream(root + "/test_batch.bin", std::ios::binary).write(records.data(), 100);
  EXPECT_THROW_MSG((data::CIFAR10{root, false}), "100 bytes is not a whole number of 3073-byte records");
  EXPECT_THROW_MSG((data::CIFAR10{root, true}), "data_batch_1.bin: file not found");
}

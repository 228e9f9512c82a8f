// CUDA results against CPU results. Every test skips when no CUDA device is present.
#include <gtest/gtest.h>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::testing::expect_close;

namespace {
const flow::Device kCuda("cuda:0");
}

TEST(Cuda, CopyRoundTripsCastsAndStrides) {
  REQUIRE_CUDA();
  flow::manual_seed(11);
  Tensor x = flow::randn({5, 7});
  Tensor d = x.to(kCuda);
  EXPECT_EQ(d.device(), kCuda);
  EXPECT_EQ(d.cpu().tolist<float>(), x.tolist<float>());
  EXPECT_EQ(d.t().contiguous().cpu().tolist<float>(), x.t().contiguous().tolist<float>());
  EXPECT_EQ(d.to(flow::kFloat64).cpu().tolist<double>(), x.to(flow::kFloat64).tolist<double>());
  EXPECT_EQ(x.t().to(kCuda).cpu().tolist<float>(), x.t().contiguous().tolist<float>());
  EXPECT_EQ(d.slice(1, 1, 7, 3).to(flow::kInt64).cpu().tolist<int64_t>(), x.slice(1, 1, 7, 3).to(flow::kInt64).tolist<int64_t>());
}

TEST(Cuda, CreationMatchesCpu) {
  REQUIRE_CUDA();
  EXPECT_EQ(flow::full({3, 2}, 2.5, flow::TensorOptions().device(kCuda)).cpu().tolist<float>(), std::vector<float>(6, 2.5f));
  EXPECT_EQ(flow::arange(0, 10, 3, flow::TensorOptions().device(kCuda)).cpu().tolist<int64_t>(), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(flow::zeros({4}, flow::TensorOptions(flow::kFloat64).device(kCuda)).cpu().tolist<double>(), std::vector<double>(4, 0));
}

TEST(Cuda, ElementwiseMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(12);
  Tensor a = flow::randn({4, 1, 5}), b = flow::rand({3, 5}) + 0.5;
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  expect_close((da + db).cpu(), a + b);
  expect_close((da - db).cpu(), a - b);
  expect_close((da * db).cpu(), a * b);
  expect_close((da / db).cpu(), a / b);
  expect_close(flow::maximum(da, db).cpu(), flow::maximum(a, b));
  expect_close((da * 2.0 + 1.0).cpu(), a * 2.0 + 1.0);
  expect_close((1.0 - da).cpu(), 1.0 - a);
  expect_close(flow::pow(db, 2.0).cpu(), flow::pow(b, 2.0), 1e-5);
  for (auto op : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& t) { return flow::relu(t); }, [](const Tensor& t) { return flow::exp(t); },
           [](const Tensor& t) { return flow::tanh(t); }, [](const Tensor& t) { return flow::sigmoid(t); },
           [](const Tensor& t) { return flow::gelu(t); }, [](const Tensor& t) { return flow::silu(t); },
           [](const Tensor& t) { return flow::abs(t); }, [](const Tensor& t) { return -t; }}) {
    expect_close(op(da).cpu(), op(a), 1e-5, 1e-6);
  }
  EXPECT_EQ(flow::gt(da, db).cpu().tolist<bool>(), flow::gt(a, b).tolist<bool>());
  EXPECT_EQ(flow::le(da, 0.0).cpu().tolist<bool>(), flow::le(a, 0.0).tolist<bool>());
  expect_close((da.transpose(0, 2) + 1.0).cpu(), a.transpose(0, 2) + 1.0);
}

// The host merges dims every operand walks as one; layouts that merge partly or not at all keep
// their per-dim offsets.
TEST(Cuda, ElementwiseOnMergedAndStridedDims) {
  REQUIRE_CUDA();
  flow::manual_seed(14);
  Tensor a = flow::randn({2, 3, 1, 4, 5}), b = flow::randn({2, 3, 1, 4, 5}), column = flow::randn({3, 1, 1});
  const Tensor da = a.to(kCuda), db = b.to(kCuda), dcolumn = column.to(kCuda);
  expect_close((da + db).cpu(), a + b);
  expect_close((da.permute({4, 1, 2, 3, 0}) * db.permute({4, 1, 2, 3, 0})).cpu(), a.permute({4, 1, 2, 3, 0}) * b.permute({4, 1, 2, 3, 0}));
  expect_close((da.slice(3, 1, 4) - db.slice(3, 0, 3)).cpu(), a.slice(3, 1, 4) - b.slice(3, 0, 3));
  expect_close((da.reshape({6, 20}).slice(1, 0, 20, 2) * 3.0).cpu(), a.reshape({6, 20}).slice(1, 0, 20, 2) * 3.0);
  expect_close((da.reshape({2, 3, 4, 5}) + dcolumn).cpu(), a.reshape({2, 3, 4, 5}) + column);
  expect_close(flow::relu(da.reshape({6, 20}).t()).cpu(), flow::relu(a.reshape({6, 20}).t()));
  // Dense runs go four elements per load: a tail after the last full four, a start off the
  // 16-byte alignment (the strided kernel), and casts and compares between element sizes.
  const Tensor flat = a.reshape({-1}), dflat = da.reshape({-1}), other = b.reshape({-1}), dother = db.reshape({-1});
  expect_close((dflat.slice(0, 0, 119) + dother.slice(0, 0, 119)).cpu(), flat.slice(0, 0, 119) + other.slice(0, 0, 119));
  expect_close((dflat.slice(0, 1, 118) * dother.slice(0, 2, 119)).cpu(), flat.slice(0, 1, 118) * other.slice(0, 2, 119));
  expect_close(flow::exp(dflat.slice(0, 3, 120)).cpu(), flow::exp(flat.slice(0, 3, 120)), 1e-5, 1e-6);
  EXPECT_EQ(dflat.slice(0, 0, 117).to(flow::kFloat64).cpu().tolist<double>(), flat.slice(0, 0, 117).to(flow::kFloat64).tolist<double>());
  EXPECT_EQ(flow::gt(dflat, dother).cpu().tolist<bool>(), flow::gt(flat, other).tolist<bool>());
  EXPECT_EQ(flow::lt(dflat.slice(0, 0, 118), 0.5).cpu().tolist<bool>(), flow::lt(flat.slice(0, 0, 118), 0.5).tolist<bool>());
  // One element: every dim has size 1 and is dropped.
  const Tensor one = a.slice(0, 0, 1).slice(1, 0, 1).slice(3, 1, 2).slice(4, 2, 3);
  EXPECT_EQ((one.to(kCuda) + 4.0).cpu().tolist<float>(), (one + 4.0).tolist<float>());
}

TEST(Cuda, MatmulAndLinearMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(13);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    Tensor a = flow::randn({2, 3, 64, 48}, dtype), b = flow::randn({48, 33}, dtype);
    expect_close(flow::matmul(a.to(kCuda), b.to(kCuda)).cpu(), flow::matmul(a, b), 1e-4, 1e-4);
    Tensor x = flow::randn({64, 784}, dtype), w = flow::randn({512, 784}, dtype), bias = flow::randn({512}, dtype);
    expect_close(flow::linear(x.to(kCuda), w.to(kCuda), bias.to(kCuda)).cpu(), flow::linear(x, w, bias), 1e-4, 1e-3);
    expect_close(flow::matmul(a.to(kCuda).transpose(-1, -2), a.to(kCuda)).cpu(), flow::matmul(a.transpose(-1, -2), a), 1e-4, 1e-3);
  }
}

TEST(Cuda, CachingAllocatorReusesBlocks) {
  REQUIRE_CUDA();
  void* first;
  {
    Tensor t = flow::empty({1 << 20}, flow::TensorOptions().device(kCuda));
    first = t.data_ptr();
  }
  Tensor again = flow::empty({1 << 20}, flow::TensorOptions().device(kCuda));
  EXPECT_EQ(again.data_ptr(), first);
}

TEST(Cuda, ErrorsWithoutDeviceOrOnMixedDevices) {
  if (flow::cuda_is_available()) {
    EXPECT_THROW_MSG(flow::ones({2}).to(kCuda) + flow::ones({2}), "[add] expected all tensors on the same device, got cuda:0 and cpu");
    EXPECT_THROW_MSG(flow::ones({2}, flow::TensorOptions().device(flow::Device("cuda:99"))), "invalid device cuda:99");
  } else {
    EXPECT_THROW_MSG(flow::ones({2}).to(kCuda), "CUDA is not available");
  }
}

// oneflow_lite's bounded program cache and batch buckets: at most program_cache_capacity programs
// whatever batch sizes arrive, batch sizes of one bucket share a program, padded runs give the
// exact-size results, and a model whose rows depend on each other keeps exact programs.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/graphs.h"
#include "common/models.h"
#include "common/test_util.h"
#include "core/grad_mode.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/ops/reduce.h"
#include "core/thread_pool.h"
#include "graph/export.h"
#include "oneflow_lite/batch_buckets.h"
#include "oneflow_lite/model.h"

namespace fs = std::filesystem;
using flow::Tensor;
using flow::TensorList;
using flow::lite::LoadOptions;
using flow::lite::Model;

namespace {

class ProgramCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = unique_temp_path(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Exports net's eval graph, traced at a batch of 8.
  void export_net(const std::shared_ptr<flow::nn::Module>& net, const flow::Shape& sample) {
    test_graphs::PredictGraph graph(net);
    graph(flow::randn(sample));
    flow::save(graph, dir_);
  }
  std::string dir_;
};

void expect_close(const Tensor& actual, const Tensor& expected, double tolerance = 1e-5) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const auto a = actual.tolist<double>(), e = expected.tolist<double>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], tolerance * std::max(1.0, std::abs(e[i]))) << "at " << i;
}

TEST(BatchBuckets, SizesUpTo8AreExactThenPowersOf2AndThreeHalves) {
  using flow::lite::bucket_size;
  for (int64_t rows = 1; rows <= 8; ++rows) EXPECT_EQ(bucket_size(rows), rows);
  EXPECT_EQ(bucket_size(9), 12);
  EXPECT_EQ(bucket_size(12), 12);
  EXPECT_EQ(bucket_size(13), 16);
  EXPECT_EQ(bucket_size(17), 24);
  EXPECT_EQ(bucket_size(65), 96);
  EXPECT_EQ(bucket_size(96), 96);
  EXPECT_EQ(bucket_size(97), 128);
  EXPECT_EQ(bucket_size(2064), 3072);
  for (int64_t rows = 9; rows <= 5000; ++rows) {
    const int64_t bucket = bucket_size(rows);
    ASSERT_GE(bucket, rows);
    ASSERT_LT(3 * (bucket - rows), bucket) << "a third or more of bucket " << bucket << " pads " << rows << " rows";
  }
}

TEST_F(ProgramCacheTest, ManyBatchSizesKeepAtMostCapacityPrograms) {
  flow::manual_seed(0);
  auto net = test_models::mlp();
  export_net(net, {8, 1, 28, 28});
  const auto model = Model::load(dir_, LoadOptions().program_cache_capacity(3).batch_buckets(false));
  EXPECT_EQ(model->cached_programs(), 1);  // the exported batch's, planned at load
  net->eval();
  const Tensor x = flow::randn({40, 1, 28, 28});
  for (int64_t batch = 1; batch <= 40; ++batch) {
    const Tensor rows = x.narrow(0, 0, batch);
    expect_close(model->run({rows}).at(0), net->forward(rows));
    ASSERT_LE(model->cached_programs(), 3);
  }
  EXPECT_EQ(model->cached_programs(), 3);
  // An evicted batch size is planned again.
  expect_close(model->run({x.narrow(0, 0, 1)}).at(0), net->forward(x.narrow(0, 0, 1)));
  EXPECT_THROW_MSG(Model::load(dir_, LoadOptions().program_cache_capacity(0)), "program_cache_capacity must be >= 1, got 0");
}

TEST_F(ProgramCacheTest, BatchesOfOneBucketShareAPaddedProgramWithExactResults) {
  flow::manual_seed(1);
  export_net(test_models::mlp(), {8, 1, 28, 28});
  const auto bucketed = Model::load(dir_);
  const auto exact = Model::load(dir_, LoadOptions().batch_buckets(false));
  EXPECT_TRUE(bucketed->batch_buckets());
  EXPECT_FALSE(exact->batch_buckets());
  EXPECT_EQ(bucketed->program_batch(65), 96);
  EXPECT_EQ(exact->program_batch(65), 65);
  EXPECT_EQ(bucketed->program_batch(5), 5);
  const Tensor x = flow::randn({300, 1, 28, 28});
  const int64_t with_96 = bucketed->cached_programs();
  for (int64_t batch : {65, 70, 80, 96}) {
    const Tensor rows = x.narrow(0, 0, batch);
    const Tensor out = bucketed->run({rows}).at(0);
    EXPECT_EQ(out.size(0), batch);
    expect_close(out, exact->run({rows}).at(0));
  }
  EXPECT_EQ(bucketed->cached_programs(), with_96) << "65, 70, 80 and 96 rows run on the program of 96";
  for (int64_t batch : {9, 13, 100, 200, 300}) {
    const Tensor rows = x.narrow(0, 0, batch);
    expect_close(bucketed->run({rows}).at(0), exact->run({rows}).at(0));
  }
  EXPECT_GT(bucketed->run_bytes(65), exact->run_bytes(65)) << "the bucket's run plans 96 rows";
}

TEST_F(ProgramCacheTest, ConvNetRowsAreIndependentToo) {
  flow::manual_seed(2);
  auto net = test_models::cnn();
  test_models::warm_up_batch_norm(*net, {16, 1, 28, 28});
  export_net(net, {8, 1, 28, 28});
  const auto bucketed = Model::load(dir_);
  const auto exact = Model::load(dir_, LoadOptions().batch_buckets(false));
  EXPECT_TRUE(bucketed->batch_buckets());
  const Tensor x = flow::randn({20, 1, 28, 28});
  EXPECT_EQ(bucketed->program_batch(20), 24);
  expect_close(bucketed->run({x}).at(0), exact->run({x}).at(0));
}

// The programs of every batch size and kernel thread count share the weights reordered into
// oneDNN's layouts (resnet50: ~100 MB a copy): a model served at many batch sizes holds one copy
// per layout, not one per program.
TEST_F(ProgramCacheTest, ProgramsShareTheirReorderedWeights) {
  // With AVX2 alone, flow's direct convolution packs its own weights (cpu/conv_blocked.h).
  if (!flow::cpu::dnnl_util::has_avx512_core()) GTEST_SKIP() << "oneDNN's convolutions keep blocked layouts with AVX-512";
  flow::manual_seed(4);
  auto net = test_models::resnet();
  test_models::warm_up_batch_norm(*net, {16, 1, 28, 28});
  export_net(net, {8, 1, 28, 28});
  const auto model = Model::load(dir_, LoadOptions().batch_buckets(false));
  const int64_t one_program = model->reordered_weight_bytes();
  ASSERT_GT(one_program, 0);
  const Tensor x = flow::randn({8, 1, 28, 28});
  Tensor expected;
  {
    flow::autograd::NoGradGuard no_grad;
    expected = net->forward(x);
  }
  const int threads = flow::get_num_threads();
  for (int n : {1, 2}) {
    flow::set_num_threads(n);
    for (int64_t batch : {1, 3, 8}) expect_close(model->run({x.narrow(0, 0, batch)}).at(0), expected.narrow(0, 0, batch), 1e-4);
  }
  flow::set_num_threads(threads);
  EXPECT_EQ(model->cached_programs(), 6);
  EXPECT_EQ(model->reordered_weight_bytes(), one_program);
  EXPECT_EQ(Model::load(dir_, LoadOptions().blocked_layouts(false))->reordered_weight_bytes(), 0);
}

// Subtracts the batch's sum (a mean would divide by the batch, making the export static): every
// output row depends on every input row.
Tensor minus_batch_sum(const Tensor& x) { return flow::relu(x - flow::sum(x, {0}, true)); }
struct MinusBatchSum : flow::nn::Graph {
  TensorList build(const TensorList& in) override { return {minus_batch_sum(in[0])}; }
};

TEST_F(ProgramCacheTest, ModelMixingRowsKeepsExactPrograms) {
  MinusBatchSum graph;
  graph(flow::randn({8, 16}));
  flow::save(graph, dir_);
  const auto model = Model::load(dir_);
  ASSERT_TRUE(model->dynamic_batch());
  EXPECT_FALSE(model->batch_buckets());
  EXPECT_EQ(model->program_batch(65), 65);
  for (int64_t batch : {3, 65, 100}) {
    const Tensor x = flow::randn({batch, 16});
    expect_close(model->run({x}).at(0), minus_batch_sum(x));
  }
}

// Runs on other threads at new batch sizes evict the programs of runs in flight: each run keeps
// its program (and its arena) until it ends.
TEST_F(ProgramCacheTest, EvictionDuringConcurrentRunsKeepsResultsRight) {
  flow::manual_seed(3);
  auto net = test_models::mlp();
  export_net(net, {8, 1, 28, 28});
  const auto model = Model::load(dir_, LoadOptions().program_cache_capacity(1));
  net->eval();
  const Tensor x = flow::randn({64, 1, 28, 28});
  Tensor expected;
  {
    flow::autograd::NoGradGuard no_grad;
    expected = net->forward(x);
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t batch = 1 + t; batch <= 64; batch += 4) {
        const Tensor out = model->run({x.narrow(0, 0, batch)}).at(0);
        const auto a = out.tolist<double>(), e = expected.narrow(0, 0, batch).tolist<double>();
        for (size_t i = 0; i < a.size(); ++i) failures[t] += std::abs(a[i] - e[i]) > 1e-4 * std::max(1.0, std::abs(e[i])) ? 1 : 0;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  EXPECT_EQ(model->cached_programs(), 1);
}

}  // namespace

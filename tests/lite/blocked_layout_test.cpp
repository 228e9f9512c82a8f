// oneflow_lite's layout pass (oneflow_lite/blocked_layout.h): convolutions, pooling, ReLU and
// residual adds on oneDNN's blocked layouts give what the ops' own kernels give on plain NCHW,
// eager included, at any batch size, with NaN and -inf through max pooling, and with values that
// ops without a blocked form read too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/linear_packed.h"
#include "core/profiler.h"
#include "graph/export.h"
#include "oneflow_lite/model.h"

namespace nn = flow::nn;
namespace fs = std::filesystem;
using flow::Tensor;

namespace {

class BlockedLayoutTest : public ::testing::Test {
 protected:

  // Exports net's inference Graph (traced at `shape`) and loads it twice: layout pass on and off.
  void export_net(const std::shared_ptr<nn::Module>& net, const flow::Shape& shape) {
    test_graphs::PredictGraph graph(net);
    graph(flow::randn(shape));
    flow::save(graph, dir_.string(), flow::ExportOptions().input_names({"image"}).output_names({"out"}));
    blocked_ = flow::lite::Model::load(dir_.string());
    plain_ = flow::lite::Model::load(dir_.string(), flow::lite::LoadOptions().blocked_layouts(false));
    net->eval();
  }

  // Both loads and eager agree on x: bit for bit where they run the same arithmetic, so to 1e-5.
  void expect_same(const std::shared_ptr<nn::Module>& net, const Tensor& x) {
    const auto blocked = blocked_->run({x}).at(0).tolist<double>(), plain = plain_->run({x}).at(0).tolist<double>();
    flow::autograd::NoGradGuard no_grad;
    const auto eager = net->forward(x).contiguous().tolist<double>();
    ASSERT_EQ(blocked.size(), plain.size());
    ASSERT_EQ(blocked.size(), eager.size());
    for (size_t i = 0; i < blocked.size(); ++i) {
      if (blocked[i] == plain[i] && plain[i] == eager[i]) continue;  // infinities included
      if (std::isnan(plain[i])) {
        EXPECT_TRUE(std::isnan(blocked[i])) << "at " << i;
        EXPECT_TRUE(std::isnan(eager[i])) << "at " << i;
        continue;
      }
      EXPECT_NEAR(blocked[i], plain[i], 1e-5 * std::max(1.0, std::abs(plain[i]))) << "at " << i;
      EXPECT_NEAR(blocked[i], eager[i], 1e-5 * std::max(1.0, std::abs(eager[i]))) << "at " << i;
    }
  }

  // expect_same on random inputs of shape (batch, sample...) for each batch, at 1 and at 2 kernel
  // threads (the caller's thread count restored after).
  void expect_same_on_one_and_two_threads(const std::shared_ptr<nn::Module>& net, const std::vector<int64_t>& sample,
                                          std::initializer_list<int64_t> batches) {
    const int threads = flow::get_num_threads();
    for (int n : {1, 2}) {
      flow::set_num_threads(n);
      for (int64_t batch : batches) {
        std::vector<int64_t> shape{batch};
        shape.insert(shape.end(), sample.begin(), sample.end());
        expect_same(net, flow::randn(flow::Shape(shape)));
      }
    }
    flow::set_num_threads(threads);
  }

  flow::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_ / "model";
  std::shared_ptr<const flow::lite::Model> blocked_, plain_;
};

TEST_F(BlockedLayoutTest, CnnAndResnetMatchThePlainKernelsAtAnyBatch) {
  flow::manual_seed(3);
  auto cnn = test_models::cnn();
  test_models::warm_up_batch_norm(*cnn, {8, 1, 28, 28});
  export_net(cnn, {4, 1, 28, 28});
  EXPECT_GT(blocked_->blocked_steps(4), 0);
  EXPECT_EQ(plain_->blocked_steps(4), 0);
  // Values only the blocked steps read get no plain buffer: the plan shrinks, and the blocked
  // buffers take their place in what a run needs.
  std::printf("cnn at batch 64: planned %lld -> %lld bytes, run %lld -> %lld bytes (plain -> blocked)\n",
              static_cast<long long>(plain_->planned_bytes(64)), static_cast<long long>(blocked_->planned_bytes(64)),
              static_cast<long long>(plain_->run_bytes(64)), static_cast<long long>(blocked_->run_bytes(64)));
  EXPECT_LT(blocked_->planned_bytes(64), plain_->planned_bytes(64));
  for (int64_t batch : {1, 3, 16}) expect_same(cnn, flow::randn({batch, 1, 28, 28}));

  auto resnet = test_models::resnet();
  test_models::warm_up_batch_norm(*resnet, {8, 1, 28, 28});
  export_net(resnet, {2, 1, 28, 28});
  // Every conv, pool, ReLU and residual add of the net (batch norm is folded into the convs).
  EXPECT_GE(blocked_->blocked_steps(2), 10);
  for (int64_t batch : {1, 5}) expect_same(resnet, flow::randn({batch, 1, 28, 28}));
}

// A 1x1 convolution copying its input, then 2x2 max pooling: what oneDNN's max pooling does
// differently (it skips NaN and gives the lowest finite value for a window of -inf) must not show.
struct CopyThenMaxPool : nn::Module {
  CopyThenMaxPool() { weight = register_parameter("weight", flow::ones({1, 1, 1, 1}), false); }
  Tensor forward(const Tensor& x) override { return flow::max_pool2d(flow::conv2d(x, weight), {2, 2}); }
  Tensor weight;
};

// Two 4x4 images: a NaN in sample 0's 2x2 window (0, 0), -inf filling sample 1's window (0, 1),
// negative values filling its window (1, 0).
Tensor nan_and_minus_infinity_windows() {
  Tensor x = flow::randn({2, 1, 4, 4}).contiguous();
  float* data = x.data_ptr<float>();
  data[5] = std::numeric_limits<float>::quiet_NaN();
  for (int i : {16 + 2, 16 + 3, 16 + 6, 16 + 7}) data[i] = -std::numeric_limits<float>::infinity();
  for (int i : {16 + 8, 16 + 9, 16 + 12, 16 + 13}) data[i] = -1.0f - static_cast<float>(i);
  return x;
}

TEST_F(BlockedLayoutTest, MaxPoolingKeepsNanAndMinusInfinity) {
  auto net = std::make_shared<CopyThenMaxPool>();
  export_net(net, {1, 1, 4, 4});
  EXPECT_EQ(blocked_->blocked_steps(1), 2);
  const Tensor x = nan_and_minus_infinity_windows();
  expect_same(net, x);
  const auto out = blocked_->run({x}).at(0).tolist<double>();
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[4 + 1], -std::numeric_limits<double>::infinity());
  expect_same(net, flow::randn({2, 1, 4, 4}));  // and the fast path on the next call
}

// The same with a ReLU between the convolution and the pooling, which the layout pass applies to
// the pooled result instead (the ReLU of a window's maximum is the maximum of its ReLUs): NaN
// stays NaN, and a window of -inf gives 0 as ReLU then pooling does.
struct CopyReluMaxPool : CopyThenMaxPool {
  Tensor forward(const Tensor& x) override { return flow::max_pool2d(flow::relu(flow::conv2d(x, weight)), {2, 2}); }
};

TEST_F(BlockedLayoutTest, ReluBeforeMaxPoolingKeepsNanAndGivesZeroForMinusInfinity) {
  auto net = std::make_shared<CopyReluMaxPool>();
  export_net(net, {1, 1, 4, 4});
  EXPECT_EQ(blocked_->blocked_steps(1), 3);
  const Tensor x = nan_and_minus_infinity_windows();
  expect_same(net, x);
  const auto out = blocked_->run({x}).at(0).tolist<double>();
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[4 + 1], 0.0);
  EXPECT_EQ(out[4 + 2], 0.0);
  for (double v : out) EXPECT_TRUE(std::isnan(v) || v >= 0.0);
}

// conv -> relu read by both max and average pooling, their sum, and the conv's own result read by
// a reduction (no blocked form): values cross to plain NCHW only where needed.
struct Branches : nn::Module {
  Branches() {
    weight = register_parameter("weight", flow::randn({12, 3, 3, 3}) * 0.3, false);
    bias = register_parameter("bias", flow::randn({12}), false);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor y = flow::conv2d(x, weight, bias, {1, 1}, {1, 1});
    const Tensor a = flow::relu(y);
    const Tensor pooled = flow::relu(flow::max_pool2d(a, {2, 2}) + flow::avg_pool2d(a, {2, 2}, {2, 2}, {0, 0}));
    return pooled.flatten(1) + y.mean({1, 2, 3}, true).flatten(1);
  }
  Tensor weight, bias;
};

TEST_F(BlockedLayoutTest, ValuesReadByBlockedAndPlainOps) {
  flow::manual_seed(4);
  auto net = std::make_shared<Branches>();
  export_net(net, {2, 3, 10, 10});
  EXPECT_GE(blocked_->blocked_steps(2), 4);
  for (int64_t batch : {1, 2, 7}) expect_same(net, flow::randn({batch, 3, 10, 10}));
}

// Residual adds (with and without a ReLU) the layout pass folds into a convolution (which then adds
// its result onto the other operand's buffer) and ones it must not fold: where the convolution
// reads that operand itself, and where a later step still reads it. Whichever it picks, the
// results are those of the plain kernels and of eager.
struct ResidualAdds : nn::Module {
  ResidualAdds() {
    for (int i = 0; i < 5; ++i) weights.push_back(register_parameter("w" + std::to_string(i), flow::randn({8, i == 0 ? 3 : 8, 3, 3}) * 0.2, false));
    bias = register_parameter("bias", flow::randn({8}), false);
  }
  Tensor conv(int i, const Tensor& x) const { return flow::conv2d(x, weights[i], i == 4 ? bias : Tensor(), {1, 1}, {1, 1}); }
  Tensor forward(const Tensor& x) override {
    const Tensor a = flow::relu(conv(0, x));
    const Tensor b = conv(1, a) + a;              // conv 1 reads a: not folded
    const Tensor d = conv(2, b);
    const Tensor e = flow::relu(conv(3, d) + b);  // b's other reader (conv 2) ran before conv 3: folded
    const Tensor g = conv(4, e) + d;              // d is read again below: not folded
    return (flow::avg_pool2d(g, {2, 2}, {2, 2}, {0, 0}) + flow::max_pool2d(d, {2, 2})).flatten(1);
  }
  std::vector<Tensor> weights;
  Tensor bias;
};

TEST_F(BlockedLayoutTest, ResidualAddsFoldIntoConvolutionsOnlyWhereSafe) {
  flow::manual_seed(5);
  auto net = std::make_shared<ResidualAdds>();
  export_net(net, {2, 3, 8, 8});
  EXPECT_GE(blocked_->blocked_steps(2), 10);
  for (int64_t batch : {1, 2, 9}) expect_same(net, flow::randn({batch, 3, 8, 8}));
}

// Grouped and strided convolutions with padding, a 3x3 max pooling with padding and stride 2
// (windows cut by the edges), then an average pooling: what the blocked steps compute besides the
// exported nets' shapes.
struct GroupedConvs : nn::Module {
  GroupedConvs() {
    grouped = register_parameter("grouped", flow::randn({12, 2, 3, 3}) * 0.3, false);
    depthwise = register_parameter("depthwise", flow::randn({12, 1, 3, 3}) * 0.3, false);
    bias = register_parameter("bias", flow::randn({12}), false);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor y = flow::relu(flow::conv2d(x, grouped, bias, {1, 1}, {1, 1}, {1, 1}, 2));
    const Tensor z = flow::max_pool2d(flow::conv2d(y, depthwise, Tensor(), {2, 2}, {1, 1}, {1, 1}, 12), {3, 3}, {2, 2}, {1, 1});
    return flow::avg_pool2d(z, {2, 2}, {1, 1}, {1, 1}).flatten(1);
  }
  Tensor grouped, depthwise, bias;
};

TEST_F(BlockedLayoutTest, GroupedConvolutionsAndPaddedPooling) {
  flow::manual_seed(6);
  auto net = std::make_shared<GroupedConvs>();
  export_net(net, {2, 4, 17, 15});
  // Which steps run blocked is oneDNN's choice for the CPU: the 6-channel groups fill AVX2's
  // 8-channel blocks (4 steps), not AVX-512's 16-channel ones (3).
  EXPECT_GE(blocked_->blocked_steps(2), 3);
  for (int64_t batch : {1, 3}) expect_same(net, flow::randn({batch, 4, 17, 15}));
}

// oneDNN fixes a primitive's threads when it is created, so each thread count gets its own
// program: runs under different caps give the same numbers.
TEST_F(BlockedLayoutTest, ThreadCapsGetTheirOwnPrograms) {
  flow::manual_seed(8);
  auto net = test_models::resnet();
  export_net(net, {2, 1, 28, 28});
  const Tensor x = flow::randn({3, 1, 28, 28});
  const auto expected = plain_->run({x}).at(0).tolist<double>();
  for (int cap : {1, 2}) {
    std::thread capped([&, cap] {
      flow::set_thread_local_num_threads(cap);
      const auto got = blocked_->run({x}).at(0).tolist<double>();
      ASSERT_EQ(got.size(), expected.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * std::max(1.0, std::abs(expected[i])));
    });
    capped.join();
  }
}

TEST_F(BlockedLayoutTest, ConcurrentRunsAndTheirArenas) {
  flow::manual_seed(5);
  auto net = test_models::resnet();
  export_net(net, {2, 1, 28, 28});
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(flow::randn({2, 1, 28, 28}));
    expected.push_back(plain_->run({inputs.back()}).at(0));
  }
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) results[t] = blocked_->run({inputs[t]}).at(0);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) {
    const auto a = results[t].tolist<double>(), e = expected[t].tolist<double>();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-5 * std::max(1.0, std::abs(e[i])));
  }
}

}  // namespace

// Linears of 2 rows or more run on weights packed at load: with AVX-512 oneDNN's matmul at any
// number of rows, else flow's product (cpu/linear_packed.h, the ReLU in it; AVX2 builds) for 2-32
// rows (2-64 on several threads), the rest on the linear kernels; all agree with the plain load
// and eager, and a NaN input reaches the output as it does there.
TEST_F(BlockedLayoutTest, FewRowLinearsRunPackedAndMatchThePlainKernels) {
  flow::manual_seed(7);
  auto mlp = test_models::mlp();
  export_net(mlp, {8, 1, 28, 28});
  const bool onednn = flow::cpu::dnnl_util::has_avx512_core();
  const int64_t packed = onednn || flow::cpu::PackedLinear::available() ? 3 : 0;
  const int threads = flow::get_num_threads();
  flow::set_num_threads(2);
  if (onednn) {
    EXPECT_EQ(blocked_->blocked_steps(64), 3);
    EXPECT_EQ(blocked_->blocked_steps(65), 3);
  } else {
    // The last linear (512 -> 10) is too small for two threads: on one, 64 rows stay with OpenBLAS.
    EXPECT_EQ(blocked_->blocked_steps(64), packed == 0 ? 0 : 2);
    EXPECT_EQ(blocked_->blocked_steps(65), 0);
  }
  for (int64_t batch : {33, 64, 65}) expect_same(mlp, flow::randn({batch, 1, 28, 28}));
  flow::set_num_threads(1);
  EXPECT_EQ(blocked_->blocked_steps(8), packed);
  EXPECT_EQ(blocked_->blocked_steps(2), packed);
  EXPECT_EQ(blocked_->blocked_steps(32), packed);
  EXPECT_EQ(blocked_->blocked_steps(1), 0);
  EXPECT_EQ(blocked_->blocked_steps(33), onednn ? 3 : 0);
  for (int64_t batch : {1, 2, 5, 7, 16, 17, 32, 33}) expect_same(mlp, flow::randn({batch, 1, 28, 28}));
  flow::set_num_threads(threads);
  Tensor x = flow::randn({4, 1, 28, 28}).contiguous();
  x.data_ptr<float>()[784 + 3] = std::numeric_limits<float>::quiet_NaN();  // sample 1
  expect_same(mlp, x);
  EXPECT_TRUE(std::isnan(blocked_->run({x}).at(0).tolist<double>()[10]));
}

// Whether oneDNN multiplies bfloat16 here with an optimized kernel (AVX512-BF16, AMX), as lite's
// pass requires of a bfloat16 linear.
bool onednn_multiplies_bfloat16() {
  if (!flow::cpu::dnnl_util::has_avx512_core()) return false;
  using dnnl::memory;
  const memory::desc x({8, 64}, memory::data_type::bf16, memory::format_tag::ab), w({64, 32}, memory::data_type::bf16, memory::format_tag::any),
      y({8, 32}, memory::data_type::bf16, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, w, y), dnnl::engine(dnnl::engine::kind::cpu, 0));
  return !flow::cpu::dnnl_util::is_reference_implementation(pd.impl_info_str());
}

// The linears of a bfloat16 AMP export (the ReLU after them too) run on weights packed at load
// where oneDNN multiplies bfloat16, one row included, and agree with the plain load; a NaN input
// reaches its output row.
TEST_F(BlockedLayoutTest, BFloat16LinearsRunPackedAndMatchThePlainKernels) {
  flow::manual_seed(9);
  auto mlp = test_models::mlp();
  test_graphs::PredictGraph graph(mlp);
  graph.config().enable_amp();
  graph(flow::randn({8, 1, 28, 28}));
  flow::save(graph, dir_.string(), flow::ExportOptions().input_names({"image"}).output_names({"out"}));
  // Kept in bfloat16 (tests/lite/bfloat16_products_test.cpp covers the choice).
  const auto keep = flow::lite::LoadOptions().bfloat16_products(flow::lite::Bfloat16Products::kKeep);
  blocked_ = flow::lite::Model::load(dir_.string(), keep);
  plain_ = flow::lite::Model::load(dir_.string(), flow::lite::LoadOptions(keep).blocked_layouts(false));
  const int64_t packed = onednn_multiplies_bfloat16() ? 3 : 0;
  for (int64_t batch : {1, 8, 65}) EXPECT_EQ(blocked_->blocked_steps(batch), packed) << batch;
  for (int64_t batch : {1, 3, 65}) {
    Tensor x = flow::randn({batch, 1, 28, 28}).contiguous();
    if (batch == 3) x.data_ptr<float>()[784 + 100] = std::numeric_limits<float>::quiet_NaN();  // sample 1
    const Tensor blocked = blocked_->run({x}).at(0), plain = plain_->run({x}).at(0);
    ASSERT_EQ(blocked.dtype(), plain.dtype());
    const auto b = blocked.to(flow::kFloat32).tolist<double>(), p = plain.to(flow::kFloat32).tolist<double>();
    ASSERT_EQ(b.size(), p.size());
    for (size_t i = 0; i < b.size(); ++i) {
      if (std::isnan(p[i])) {
        EXPECT_TRUE(std::isnan(b[i])) << "batch " << batch << " at " << i;
      } else {
        EXPECT_NEAR(b[i], p[i], 1e-2 * std::max(1.0, std::abs(p[i]))) << "batch " << batch << " at " << i;  // bfloat16 roundings
      }
    }
    if (batch == 3) {
      EXPECT_TRUE(std::isnan(b[10])) << "sample 1";
    }
  }
}

// A NaN pixel reaches the output through convolutions with their ReLU, residual adds with theirs
// and pooling, as on the plain kernels and in eager.
TEST_F(BlockedLayoutTest, NanThroughConvolutionAndReluAsOnThePlainKernels) {
  flow::manual_seed(8);
  for (auto net : {test_models::cnn(), test_models::resnet()}) {
    test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});
    export_net(net, {2, 1, 28, 28});
    Tensor x = flow::randn({2, 1, 28, 28}).contiguous();
    x.data_ptr<float>()[784 + 14 * 28 + 14] = std::numeric_limits<float>::quiet_NaN();  // sample 1, centre
    expect_same(net, x);
    const auto out = blocked_->run({x}).at(0).tolist<double>();
    EXPECT_TRUE(std::isnan(out[10])) << "sample 1's logits";
    EXPECT_FALSE(std::isnan(out[0])) << "sample 0's logits";
  }
}

// MobileNetV2's inverted residual (1x1 expansion, ReLU6, depthwise 3x3, ReLU6, 1x1 projection
// added to the input) and two clamps the convolutions must not apply themselves: one that moves 0
// (it would write the padding channels of a blocked layout) and one whose input is also read by
// another step. ReLU6 is a clamp to [0, 6] that keeps NaN, on the blocked layouts as on the plain
// kernels.
struct InvertedResidual : nn::Module {
  InvertedResidual() {
    expand = register_parameter("expand", flow::randn({36, 6, 1, 1}) * 0.8, false);
    depthwise = register_parameter("depthwise", flow::randn({36, 1, 3, 3}) * 0.5, false);
    bias = register_parameter("bias", flow::randn({36}), false);
    project = register_parameter("project", flow::randn({6, 36, 1, 1}) * 0.3, false);
    last = register_parameter("last", flow::randn({10, 6, 3, 3}) * 0.3, false);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor hidden = flow::clamp(flow::conv2d(x, expand), 0, 6);
    const Tensor spatial = flow::clamp(flow::conv2d(hidden, depthwise, bias, {1, 1}, {1, 1}, {1, 1}, 36), 0, 6);
    const Tensor y = x + flow::conv2d(spatial, project);
    const Tensor shifted = flow::clamp(flow::conv2d(y, last, Tensor(), {2, 2}), 0.5, 2);
    const Tensor z = flow::conv2d(y, last);
    return shifted.flatten(1).sum({1}, true) + (flow::clamp(z, 0, 6) + z).flatten(1).mean({1}, true);
  }
  Tensor expand, depthwise, bias, project, last;
};

TEST_F(BlockedLayoutTest, ReluSixAndOtherClampsAfterConvolutions) {
  flow::manual_seed(9);
  auto net = std::make_shared<InvertedResidual>();
  export_net(net, {2, 6, 9, 9});
  EXPECT_GE(blocked_->blocked_steps(2), 6);
  for (int64_t batch : {1, 2, 5}) expect_same(net, flow::randn({batch, 6, 9, 9}));
  Tensor x = flow::randn({2, 6, 9, 9}).contiguous();
  x.data_ptr<float>()[6 * 81 + 40] = std::numeric_limits<float>::quiet_NaN();  // sample 1, channel 0, centre
  expect_same(net, x);
  const auto out = blocked_->run({x}).at(0).tolist<double>();
  EXPECT_TRUE(std::isnan(out[1])) << "sample 1";
  EXPECT_FALSE(std::isnan(out[0])) << "sample 0";
}

// Where the plan proves that no NaN reaches a convolution from model inputs that are finite and at
// most 1e6 in magnitude, its ReLU6 runs as oneDNN's post-op; inputs outside that run every op
// through its kernel, so NaN, infinities and huge values give what the plain kernels give.
TEST_F(BlockedLayoutTest, ActivationsInPrimitivesOnlyForInputsWithinTheBound) {
  flow::manual_seed(10);
  auto net = std::make_shared<InvertedResidual>();
  export_net(net, {2, 6, 9, 9});
  if (flow::cpu::dnnl_util::has_avx512_core()) {
    EXPECT_GE(blocked_->activations_in_primitives(2), 2);  // expansion and depthwise
  }
  EXPECT_EQ(plain_->activations_in_primitives(2), 0);
  for (const float special : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -2e6f, 1e30f}) {
    SCOPED_TRACE(special);
    Tensor x = flow::randn({2, 6, 9, 9}).contiguous();
    x.data_ptr<float>()[6 * 81 + 40] = special;  // sample 1, channel 0, centre
    expect_same(net, x);
  }
  // Just inside the bound: the blocked steps run, and agree.
  Tensor x = flow::randn({2, 6, 9, 9}).contiguous();
  x.data_ptr<float>()[7] = 1e6f;
  x.data_ptr<float>()[8] = -1e6f;
  expect_same(net, x);
  int64_t blocked_events = 0;
  {
    flow::profiler::Profile profile;
    blocked_->run({x});
    profile.stop();
    for (const auto& event : profile.events()) blocked_events += event.category == "lite_blocked";
  }
  EXPECT_GT(blocked_events, 0);
  x.data_ptr<float>()[9] = std::numeric_limits<float>::quiet_NaN();
  flow::profiler::Profile fallback;
  blocked_->run({x});
  fallback.stop();
  for (const auto& event : fallback.events()) EXPECT_NE(event.category, "lite_blocked") << event.name;
}

// A NaN weight is a NaN no input check can exclude: its convolution keeps flow's own ReLU6 pass,
// and what comes after it gives the plain kernels' NaN.
TEST_F(BlockedLayoutTest, ANanWeightKeepsItsConvolutionsActivationOutOfThePrimitive) {
  flow::manual_seed(11);
  auto net = std::make_shared<InvertedResidual>();
  export_net(net, {2, 6, 9, 9});
  const int64_t with_finite_weights = blocked_->activations_in_primitives(2);
  net->depthwise.data_ptr<float>()[4] = std::numeric_limits<float>::quiet_NaN();  // channel 0's centre tap
  export_net(net, {2, 6, 9, 9});
  if (flow::cpu::dnnl_util::has_avx512_core()) {
    EXPECT_EQ(blocked_->activations_in_primitives(2), with_finite_weights - 1);
  }
  expect_same(net, flow::randn({2, 6, 9, 9}));
}

// A LeNet's first layer (1 -> 32 channels, 3x3, no padding), its ReLU (or none) and 2x2 max
// pooling, then a second convolution: on AVX-512 the first three run as one pass
// (cpu::ShallowConvPool) that never writes the convolution's output, elsewhere as three steps.
struct FirstLayerThenConv : nn::Module {
  explicit FirstLayerThenConv(bool relu) : relu(relu) {
    first = register_parameter("first", flow::randn({32, 1, 3, 3}) * 0.5, false);
    first_bias = register_parameter("first_bias", flow::randn({32}) * 0.1, false);
    second = register_parameter("second", flow::randn({16, 32, 3, 3}) * 0.1, false);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor y = flow::conv2d(x, first, first_bias);
    return flow::conv2d(flow::max_pool2d(relu ? flow::relu(y) : y, {2, 2}), second);
  }
  bool relu;
  Tensor first, first_bias, second;
};

TEST_F(BlockedLayoutTest, FirstLayerReluAndPoolingRunAsOnePassOnAvx512) {
  for (const bool relu : {true, false}) {
    SCOPED_TRACE(relu ? "with ReLU" : "without ReLU");
    flow::manual_seed(12);
    auto net = std::make_shared<FirstLayerThenConv>(relu);
    export_net(net, {2, 1, 28, 28});
    // The first convolution's output at batch 16 (1.4 MB) is memory a run holds only without the fold.
    const int64_t conv_output_bytes = 16 * 32 * 26 * 26 * 4;
    if (flow::cpu::dnnl_util::has_avx512_core()) {
      EXPECT_LT(blocked_->run_bytes(16), conv_output_bytes);
    } else {
      EXPECT_GE(blocked_->run_bytes(16), conv_output_bytes);
    }
    for (int64_t batch : {1, 3, 16}) expect_same(net, flow::randn({batch, 1, 28, 28}));
    // NaN in sample 0 (its windows' maxima and everything the second convolution reads of them),
    // -inf filling sample 1's first rows (without the ReLU, -inf pooled).
    Tensor x = flow::randn({2, 1, 28, 28}).contiguous();
    x.data_ptr<float>()[13 * 28 + 13] = std::numeric_limits<float>::quiet_NaN();
    for (int i = 0; i < 4 * 28; ++i) x.data_ptr<float>()[784 + i] = -std::numeric_limits<float>::infinity();
    expect_same(net, x);
  }
}

// flow::profiler sees one event per lite step: the op's name, "lite_blocked" for the steps on
// blocked layouts and "lite_node" for the rest, with the FLOPs the ops count in eager.
TEST_F(BlockedLayoutTest, ProfilerRecordsEveryStepWithItsFlops) {
  flow::manual_seed(9);
  auto cnn = test_models::cnn();
  test_models::warm_up_batch_norm(*cnn, {8, 1, 28, 28});
  export_net(cnn, {2, 1, 28, 28});
  const Tensor x = flow::randn({3, 1, 28, 28});
  blocked_->run({x});  // load the batch's program outside the profile
  plain_->run({x});
  auto conv_flops = [](const flow::profiler::Profile& profile, const std::string& category) {
    int64_t flops = 0, calls = 0;
    for (const auto& event : profile.events()) {
      EXPECT_TRUE(event.category == "lite_blocked" || event.category == "lite_node") << event.category;
      if (event.name != "conv2d") continue;
      EXPECT_EQ(event.category, category);
      ++calls;
      flops += event.flops.value_or(0);
      EXPECT_EQ(event.input_dims.at(0).at(0), 3) << "the run's batch";
    }
    EXPECT_EQ(calls, 2) << category;
    return flops;
  };
  int64_t eager_flops = 0;
  {
    flow::autograd::NoGradGuard no_grad;
    flow::profiler::Profile profile;
    cnn->forward(x);
    profile.stop();
    for (const auto& event : profile.events()) eager_flops += event.name == "conv2d" ? event.flops.value_or(0) : 0;
  }
  ASSERT_GT(eager_flops, 0);
  {
    flow::profiler::Profile profile;
    blocked_->run({x});
    profile.stop();
    EXPECT_EQ(conv_flops(profile, "lite_blocked"), eager_flops);
  }
  {
    flow::profiler::Profile profile;
    plain_->run({x});
    profile.stop();
    EXPECT_EQ(conv_flops(profile, "lite_node"), eager_flops);
    for (const auto& event : profile.events()) EXPECT_EQ(event.category, "lite_node") << event.name;
  }
}

namespace {

// relu(conv_b(h) + h) with h = relu(conv_a(x)): two pointwise convolutions whose results, at
// 64 channels on 64x64, are larger than a core's cache (resnet50's bottleneck pattern), with the
// residual sum folded into the second and a ReLU after each.
struct PointwiseResidual : nn::Module {
  PointwiseResidual() {
    conv_a = register_module("conv_a", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 64, 1)));
    conv_b = register_module("conv_b", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(64, 64, 1).bias(false)));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = flow::relu((*conv_a)(x));
    return flow::relu(flow::add((*conv_b)(h), h));
  }
  std::shared_ptr<nn::Conv2d> conv_a, conv_b;
};

}  // namespace

// Large pointwise convolutions with a folded residual sum and ReLUs: the same results as the plain
// load and eager at several batches, on one and two threads, and a NaN reaches the output through
// the ReLUs (which stay separate passes: oneDNN's ReLU post-op turns NaN into 0).
TEST_F(BlockedLayoutTest, LargePointwiseConvolutionsWithResidualMatchThePlainKernels) {
  flow::manual_seed(11);
  auto net = std::make_shared<PointwiseResidual>();
  export_net(net, {2, 16, 64, 64});
  expect_same_on_one_and_two_threads(net, {16, 64, 64}, {1, 2, 3});
  Tensor x = flow::randn({2, 16, 64, 64}).contiguous();
  x.data_ptr<float>()[64 * 64 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();  // sample 1, channel 0, pixel 5
  expect_same(net, x);
  const auto out = blocked_->run({x}).at(0).tolist<double>();
  EXPECT_TRUE(std::isnan(out[64 * 64 * 64 + 5]));  // sample 1, channel 0, pixel 5
  EXPECT_FALSE(std::isnan(out[5]));
}

namespace {

// Residual adds after pointwise convolutions, which oneDNN's brgconv_1x1 (AVX-512) does not take
// as a sum post-op: the add runs as its own step (flow's loop, its ReLU in the same pass) in the
// buffer of an operand nothing reads after it. y is read by a later add, so y + conv_c(y) must not
// write into y's buffer (its first operand's); the last add may write into either operand's.
struct PointwiseResidualChain : nn::Module {
  PointwiseResidualChain() {
    conv_a = register_module("conv_a", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 32, 1)));
    conv_b = register_module("conv_b", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 32, 1).bias(false)));
    conv_c = register_module("conv_c", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 32, 1)));
    conv_d = register_module("conv_d", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 32, 1)));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = flow::relu((*conv_a)(x));
    const Tensor y = flow::relu(flow::add((*conv_b)(h), h));
    const Tensor z = flow::add(y, (*conv_c)(y));
    return flow::relu(flow::add((*conv_d)(z), y));
  }
  std::shared_ptr<nn::Conv2d> conv_a, conv_b, conv_c, conv_d;
};

}  // namespace

TEST_F(BlockedLayoutTest, ResidualAddsAfterPointwiseConvolutionsRunInPlaceAsOnThePlainKernels) {
  flow::manual_seed(12);
  auto net = std::make_shared<PointwiseResidualChain>();
  export_net(net, {2, 8, 24, 24});
  EXPECT_EQ(blocked_->blocked_steps(2), 8);  // 4 convolutions, 3 adds, the first ReLU
  expect_same_on_one_and_two_threads(net, {8, 24, 24}, {1, 2, 5});
  // NaN and -inf pixels: NaN stays NaN through the adds' ReLUs, -inf gives 0 or +-inf or NaN
  // (inf - inf) as on the plain kernels.
  Tensor x = flow::randn({2, 8, 24, 24}).contiguous();
  float* data = x.data_ptr<float>();
  data[24 * 24 * 8 + 7] = std::numeric_limits<float>::quiet_NaN();      // sample 1, channel 0, pixel 7
  data[3 * 24 * 24 + 100] = -std::numeric_limits<float>::infinity();  // sample 0, channel 3, pixel 100
  expect_same(net, x);
  const auto out = blocked_->run({x}).at(0).tolist<double>();
  EXPECT_TRUE(std::isnan(out[32 * 24 * 24 + 7]));  // sample 1, channel 0, pixel 7
  EXPECT_FALSE(std::isnan(out[7]));
}

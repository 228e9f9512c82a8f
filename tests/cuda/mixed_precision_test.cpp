// float16 and bfloat16 on CUDA against the CPU: element-wise ops, casts and sums compute in float
// and round once on both (the same bits where both round one float result), products run on the
// tensor cores with float accumulation, and autocast training steps (eager with amp::GradScaler,
// and the Graph with enable_amp) follow the CPU's. Every test skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/graphs.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "core/autocast.h"
#include "nn/modules.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

using flow::Tensor;
using flow::testing::expect_close;

namespace {
const flow::Device kCuda("cuda:0");

void expect_same_bits(const Tensor& cuda_result, const Tensor& cpu_result) {
  ASSERT_EQ(cuda_result.dtype(), cpu_result.dtype());
  ASSERT_EQ(cuda_result.shape(), cpu_result.shape());
  const std::vector<double> got = flow::testing::values(cuda_result.cpu()), want = flow::testing::values(cpu_result);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// One unit in the last place of a 16-bit value, relative.
double ulp(flow::DType dtype) { return dtype == flow::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7); }

const std::vector<flow::DType> kReduced = {flow::kFloat16, flow::kBFloat16};

std::shared_ptr<flow::nn::Sequential> make_mlp() {
  flow::manual_seed(41);
  return std::make_shared<flow::nn::Sequential>(std::make_shared<flow::nn::Flatten>(), std::make_shared<flow::nn::Linear>(36, 32),
                                                std::make_shared<flow::nn::ReLU>(), std::make_shared<flow::nn::Linear>(32, 5));
}

}  // namespace

TEST(CudaMixedPrecision, CastsRoundAsOnTheCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(42);
  Tensor x = (flow::randn({7, 33}) * 1000).contiguous();
  x.data_ptr<float>()[3] = std::numeric_limits<float>::infinity();
  x.data_ptr<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  x.data_ptr<float>()[5] = 1e-30f;  // below float16's range: flushes to a subnormal or zero alike
  for (flow::DType dtype : kReduced) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const Tensor on_cuda = x.to(kCuda).to(dtype);
    expect_same_bits(on_cuda, x.to(dtype));
    expect_same_bits(on_cuda.to(flow::kFloat32), x.to(dtype).to(flow::kFloat32));
    expect_same_bits(on_cuda.t().contiguous(), x.to(dtype).t().contiguous());
    const Tensor ints = flow::arange(-20, 20, 3);
    expect_same_bits(ints.to(kCuda).to(dtype), ints.to(dtype));
    expect_same_bits(on_cuda.to(flow::kFloat16 == dtype ? flow::kBFloat16 : flow::kFloat16), x.to(dtype).to(flow::kFloat16 == dtype ? flow::kBFloat16 : flow::kFloat16));
    EXPECT_EQ(flow::full({2, 3}, 1.5, flow::TensorOptions(dtype).device(kCuda)).to(flow::kFloat32).cpu().tolist<float>(), std::vector<float>(6, 1.5f));
  }
}

TEST(CudaMixedPrecision, ElementwiseOpsComputeInFloatAndRoundOnce) {
  REQUIRE_CUDA();
  flow::manual_seed(43);
  for (flow::DType dtype : kReduced) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const Tensor a = (flow::randn({4, 1, 37}) * 3).to(dtype), b = (flow::rand({3, 37}) + 0.5).to(dtype);
    const Tensor da = a.to(kCuda), db = b.to(kCuda);
    // One float operation rounded once: the same bits as the CPU.
    expect_same_bits(da + db, a + b);
    expect_same_bits(da - db, a - b);
    expect_same_bits(da * db, a * b);
    expect_same_bits(da / db, a / b);
    expect_same_bits(flow::maximum(da, db), flow::maximum(a, b));
    expect_same_bits(flow::relu(da), flow::relu(a));
    expect_same_bits(-da, -a);
    expect_same_bits(da * 0.3, a * 0.3);
    expect_same_bits(flow::gt(da, db), flow::gt(a, b));
    expect_same_bits(flow::where(flow::gt(da, db), da, db), flow::where(flow::gt(a, b), a, b));
    EXPECT_EQ(flow::argmax(da, 2).cpu().tolist<int64_t>(), flow::argmax(a, 2).tolist<int64_t>());  // a classifier's accuracy
    const flow::OpDef& relu_grad = flow::find_op("relu_grad");
    expect_same_bits(flow::apply(relu_grad, {db.expand({4, 3, 37}).contiguous(), da.expand({4, 3, 37}).contiguous()}).at(0),
                     flow::apply(relu_grad, {b.expand({4, 3, 37}).contiguous(), a.expand({4, 3, 37}).contiguous()}).at(0));
    // Device and host math libraries may differ by an ulp of float before rounding.
    expect_close(flow::tanh(da).cpu(), flow::tanh(a), ulp(dtype), 0);
    expect_close(flow::sigmoid(da).cpu(), flow::sigmoid(a), ulp(dtype), 0);
  }
}

TEST(CudaMixedPrecision, SumsAccumulateInFloat) {
  REQUIRE_CUDA();
  flow::manual_seed(44);
  for (flow::DType dtype : kReduced) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const Tensor x = flow::randn({64, 8, 13}).to(dtype);
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{0, 2}, std::vector<int64_t>{}}) {
      const Tensor on_cuda = flow::sum(x.to(kCuda), dims);
      EXPECT_EQ(on_cuda.dtype(), dtype);
      // Float accumulation in another order, one rounding: within an ulp of the float sum.
      expect_close(on_cuda.cpu(), flow::sum(x.to(flow::kFloat32), dims).to(dtype), ulp(dtype), ulp(dtype));
    }
  }
}

TEST(CudaMixedPrecision, ProductsAccumulateInFloat) {
  REQUIRE_CUDA();
  flow::manual_seed(45);
  for (flow::DType dtype : kReduced) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const Tensor a = flow::randn({2, 33, 70}).to(dtype), b = flow::randn({70, 17}).to(dtype), bias = flow::randn({17}).to(dtype);
    const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
    const Tensor product = flow::matmul(a.to(kCuda), b.to(kCuda));
    EXPECT_EQ(product.dtype(), dtype);
    expect_close(product.cpu().to(flow::kFloat32), flow::matmul(wide(a), wide(b)), 2 * ulp(dtype), 1e-2);
    const Tensor w = b.t().contiguous();
    const Tensor linear = flow::linear(a.to(kCuda), w.to(kCuda), bias.to(kCuda));
    expect_close(linear.cpu().to(flow::kFloat32), flow::linear(wide(a), wide(w), wide(bias)), 2 * ulp(dtype), 1e-2);
  }
}

TEST(CudaMixedPrecision, ConvolutionAndPoolingRunInSixteenBits) {
  REQUIRE_CUDA();
  flow::manual_seed(47);
  for (flow::DType dtype : kReduced) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const Tensor x = flow::randn({4, 8, 12, 12}).to(dtype), w = flow::randn({16, 8, 3, 3}).to(dtype), b = flow::randn({16}).to(dtype);
    const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
    const Tensor y = flow::conv2d(x.to(kCuda), w.to(kCuda), b.to(kCuda), {1, 1}, {1, 1});
    EXPECT_EQ(y.dtype(), dtype);
    // 72 products per output accumulated in float: within a few ulps of the float32 result.
    const Tensor expected = flow::conv2d(wide(x), wide(w), wide(b), {1, 1}, {1, 1});
    expect_close(y.cpu().to(flow::kFloat32), expected, 4 * ulp(dtype), 4 * ulp(dtype) * 8);
    const Tensor grad = flow::randn(y.shape()).to(dtype);
    const flow::Attrs attrs = flow::Attrs().set("stride", std::vector<int64_t>{1, 1}).set("padding", std::vector<int64_t>{1, 1})
                                  .set("dilation", std::vector<int64_t>{1, 1}).set("groups", int64_t{1});
    const Tensor grad_input = flow::apply(flow::find_op("conv2d_grad_input"), {grad.to(kCuda), w.to(kCuda)},
                                          flow::Attrs(attrs).set("input_shape", x.shape().vec())).at(0);
    const Tensor wide_grad_input = flow::apply(flow::find_op("conv2d_grad_input"), {wide(grad), wide(w)},
                                               flow::Attrs(attrs).set("input_shape", x.shape().vec())).at(0);
    expect_close(grad_input.cpu().to(flow::kFloat32), wide_grad_input, 4 * ulp(dtype), 4 * ulp(dtype) * 16);
    // Max pooling selects: the CPU's values and indices.
    const flow::Attrs pool = flow::Attrs().set("kernel_size", std::vector<int64_t>{2, 2}).set("stride", std::vector<int64_t>{2, 2})
                                 .set("padding", std::vector<int64_t>{0, 0});
    const flow::TensorList on_cuda = flow::apply(flow::find_op("max_pool2d"), {x.to(kCuda)}, pool);
    const flow::TensorList on_cpu = flow::apply(flow::find_op("max_pool2d"), {x}, pool);
    expect_same_bits(on_cuda.at(0), on_cpu.at(0));
    EXPECT_EQ(on_cuda.at(1).cpu().tolist<int64_t>(), on_cpu.at(1).tolist<int64_t>());
    const Tensor dy = flow::randn(on_cpu.at(0).shape()).to(dtype);
    const flow::Attrs grad_pool = flow::Attrs(pool).set("input_shape", x.shape().vec());
    expect_same_bits(flow::apply(flow::find_op("max_pool2d_grad"), {dy.to(kCuda), on_cuda.at(1)}, grad_pool).at(0),
                     flow::apply(flow::find_op("max_pool2d_grad"), {dy, on_cpu.at(1)}, grad_pool).at(0));
  }
}

// Runs without a device: what a mixed-precision step needs is registered in 16 bits.
TEST(CudaMixedPrecision, SixteenBitKernelsAreRegistered) {
#ifndef FLOW_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#endif
  for (const char* op : {"copy", "full", "add", "mul", "relu", "relu_grad", "mul_scalar", "gt", "matmul", "linear", "reduce_sum", "argmax", "conv2d"}) {
    for (flow::DType dtype : kReduced) EXPECT_NO_THROW(flow::find_op(op).kernel(flow::DeviceType::kCUDA, dtype)) << op;
  }
  // Softmax and the losses run in float32 under autocast.
  EXPECT_THROW_MSG(flow::find_op("log_softmax").kernel(flow::DeviceType::kCUDA, flow::kFloat16), "[log_softmax] no cuda kernel for dtype float16");
}

// Eager autocast in float16 with a GradScaler, and the Graph with enable_amp(float16) and
// set_grad_scaler, on CUDA against the same on the CPU: float32 master weights, the same losses
// (up to the summation order of 16-bit products), the same scales, an inf step skipped alike.
TEST(CudaMixedPrecision, AutocastTrainingWithGradScalerMatchesCpu) {
  REQUIRE_CUDA();
  auto cpu_model = make_mlp(), cuda_model = make_mlp(), cpu_graph_model = make_mlp(), cuda_graph_model = make_mlp();
  cuda_model->to(kCuda);
  cuda_graph_model->to(kCuda);
  const auto options = flow::optim::SGDOptions(0.05).momentum(0.9);
  flow::optim::SGD cpu_sgd(cpu_model->parameters(), options), cuda_sgd(cuda_model->parameters(), options);
  const auto scaler_options = flow::amp::GradScalerOptions().init_scale(1024).growth_interval(2);
  flow::amp::GradScaler cpu_scaler(scaler_options), cuda_scaler(scaler_options);
  test_graphs::TrainGraph cpu_graph(cpu_graph_model, std::make_shared<flow::optim::SGD>(cpu_graph_model->parameters(), options));
  test_graphs::TrainGraph cuda_graph(cuda_graph_model, std::make_shared<flow::optim::SGD>(cuda_graph_model->parameters(), options));
  auto cpu_graph_scaler = std::make_shared<flow::amp::GradScaler>(scaler_options);
  auto cuda_graph_scaler = std::make_shared<flow::amp::GradScaler>(scaler_options);
  for (auto* graph : {&cpu_graph, &cuda_graph}) graph->config().enable_amp(true, flow::kFloat16);
  cpu_graph.set_grad_scaler(cpu_graph_scaler);
  cuda_graph.set_grad_scaler(cuda_graph_scaler);
  flow::nn::CrossEntropyLoss loss_fn;
  auto eager_step = [&](flow::nn::Module& model, flow::optim::SGD& sgd, flow::amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
    sgd.zero_grad();
    Tensor loss;
    {
      const flow::autocast amp(flow::kFloat16);
      loss = loss_fn(model.forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(sgd);
    scaler.update();
    return loss;
  };
  flow::manual_seed(46);
  for (int step = 0; step < 5; ++step) {
    Tensor x = flow::randn({16, 1, 6, 6}).contiguous();
    if (step == 1) x.data_ptr<float>()[0] = std::numeric_limits<float>::infinity();
    const Tensor y = flow::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0});
    const Tensor cpu_loss = eager_step(*cpu_model, cpu_sgd, cpu_scaler, x, y);
    const Tensor cuda_loss = eager_step(*cuda_model, cuda_sgd, cuda_scaler, x.to(kCuda), y.to(kCuda));
    const Tensor cpu_graph_loss = cpu_graph({x, y}).at(0);
    const Tensor cuda_graph_loss = cuda_graph({x.to(kCuda), y.to(kCuda)}).at(0);
    EXPECT_EQ(cuda_loss.dtype(), flow::kFloat32);
    if (step != 1) {
      expect_close(cuda_loss.cpu(), cpu_loss, 5e-3, 5e-3);
      expect_close(cuda_graph_loss.cpu(), cpu_graph_loss, 5e-3, 5e-3);
    }
    EXPECT_EQ(cuda_scaler.get_scale(), cpu_scaler.get_scale()) << step;
    EXPECT_EQ(cuda_graph_scaler->get_scale(), cpu_graph_scaler->get_scale()) << step;
  }
  EXPECT_EQ(cpu_scaler.get_scale(), 1024.0);  // backoff at step 1, growth after steps 2-3
  for (auto [cuda, cpu] : {std::pair{cuda_model, cpu_model}, std::pair{cuda_graph_model, cpu_graph_model}}) {
    const auto on_cuda = cuda->named_parameters(), on_cpu = cpu->named_parameters();
    for (size_t i = 0; i < on_cpu.size(); ++i) {
      EXPECT_EQ(on_cuda[i].second.dtype(), flow::kFloat32);
      expect_close(on_cuda[i].second.cpu(), on_cpu[i].second, 1e-2, 1e-3);
    }
  }
}

// torch.autocast("cuda", ...) beside a CPU guard: each device type follows its own policy, so a
// program can train on CUDA under float16 autocast and evaluate on the CPU in float32 or bfloat16.
TEST(CudaAutocast, EachDeviceTypeFollowsItsOwnGuard) {
  REQUIRE_CUDA();
  flow::manual_seed(47);
  const Tensor x = flow::randn({4, 8}), w = flow::randn({3, 8});
  const flow::autocast cuda_amp("cuda");
  EXPECT_EQ(flow::linear(x.to(kCuda), w.to(kCuda)).dtype(), flow::kFloat16);
  EXPECT_EQ(flow::linear(x, w).dtype(), flow::kFloat32);
  const flow::autocast cpu_amp(flow::kCPU);
  EXPECT_EQ(flow::linear(x, w).dtype(), flow::kBFloat16);
  EXPECT_EQ(flow::linear(x.to(kCuda), w.to(kCuda)).dtype(), flow::kFloat16);
}

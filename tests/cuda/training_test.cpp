// CUDA reductions, softmax, gather/scatter (scatter_ too), where, relu's gradient and the fused SGD update
// against the CPU, then whole training steps (eager and Graph) on CUDA against the CPU. Every test
// skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <limits>

#include "common/graphs.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/functional.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

using flow::Tensor;
using flow::testing::expect_close;

namespace {
const flow::Device kCuda("cuda:0");

std::shared_ptr<flow::nn::Sequential> make_mlp() {
  flow::manual_seed(31);
  return std::make_shared<flow::nn::Sequential>(std::make_shared<flow::nn::Flatten>(), std::make_shared<flow::nn::Linear>(36, 24),
                                                std::make_shared<flow::nn::ReLU>(), std::make_shared<flow::nn::Linear>(24, 5));
}

void expect_same_parameters(flow::nn::Module& cuda_model, flow::nn::Module& cpu_model, double tolerance) {
  const auto on_cuda = cuda_model.named_parameters(), on_cpu = cpu_model.named_parameters();
  ASSERT_EQ(on_cuda.size(), on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    EXPECT_EQ(on_cuda[i].second.device(), kCuda) << on_cpu[i].first;
    expect_close(on_cuda[i].second.cpu(), on_cpu[i].second, tolerance, tolerance);
  }
}
}  // namespace

TEST(CudaTraining, SumsOverAnyDimsMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(21);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    const Tensor x = flow::randn({4, 5, 300}, dtype), d = x.to(kCuda);
    expect_close(flow::sum(d).cpu(), flow::sum(x), 1e-5, 1e-4);
    expect_close(flow::sum(d, {0}).cpu(), flow::sum(x, {0}), 1e-5, 1e-5);
    expect_close(flow::sum(d, {2}, true).cpu(), flow::sum(x, {2}, true), 1e-5, 1e-5);
    expect_close(flow::sum(d, {1, 2}).cpu(), flow::sum(x, {1, 2}), 1e-5, 1e-4);
    expect_close(flow::sum(d, {0, 2}).cpu(), flow::sum(x, {0, 2}), 1e-5, 1e-4);  // not adjacent: permuted first
    expect_close(flow::mean(d.transpose(0, 2), {1}).cpu(), flow::mean(x.transpose(0, 2), {1}), 1e-5, 1e-6);
  }
  const Tensor counts = flow::arange(0, 1000).reshape({10, 100});
  EXPECT_EQ(flow::sum(counts.to(kCuda), {1}).cpu().tolist<int64_t>(), flow::sum(counts, {1}).tolist<int64_t>());
  EXPECT_EQ(flow::sum(flow::zeros({0, 3}).to(kCuda), {0}).cpu().tolist<float>(), std::vector<float>(3, 0.0f));
}

TEST(CudaTraining, ArgmaxAndSoftmaxMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(22);
  const Tensor x = flow::randn({6, 7, 9}), d = x.to(kCuda);
  for (int64_t dim : {0, 1, 2}) {
    EXPECT_EQ(d.argmax(dim).cpu().tolist<int64_t>(), x.argmax(dim).tolist<int64_t>()) << dim;
    expect_close(flow::softmax(d, dim).cpu(), flow::softmax(x, dim), 1e-5, 1e-6);
    expect_close(flow::log_softmax(d, dim).cpu(), flow::log_softmax(x, dim), 1e-5, 1e-5);
  }
  const Tensor wide = flow::randn({3, 5000}, flow::kFloat64);
  expect_close(flow::log_softmax(wide.to(kCuda), 1).cpu(), flow::log_softmax(wide, 1), 1e-10, 1e-10);
  // Ties take the first index; NaN counts as the maximum.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor ties = flow::tensor(std::vector<float>{1, 3, 3, 0, 2, nan, 5, nan}).reshape({2, 4});
  EXPECT_EQ(ties.argmax(1).tolist<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(ties.to(kCuda).argmax(1).cpu().tolist<int64_t>(), (std::vector<int64_t>{1, 1}));
}

TEST(CudaTraining, GatherScatterAndWhereMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(23);
  const Tensor x = flow::randn({4, 6}), d = x.to(kCuda);
  const Tensor index = flow::tensor(std::vector<int64_t>{0, 5, -1, 2, 2, 3, 1, 0}).reshape({4, 2});
  EXPECT_EQ(flow::gather(d, 1, index.to(kCuda)).cpu().tolist<float>(), flow::gather(x, 1, index).tolist<float>());
  const Tensor index32 = index.to(flow::kInt32);
  EXPECT_EQ(flow::gather(d, 1, index32.to(kCuda)).cpu().tolist<float>(), flow::gather(x, 1, index32).tolist<float>());
  // Repeated indices: the last write wins, additions accumulate, as on the CPU.
  const Tensor src = flow::randn({4, 2});
  const Tensor repeated = flow::tensor(std::vector<int64_t>{1, 1, 0, 0, 3, -3, 5, 4}).reshape({4, 2});
  EXPECT_EQ(flow::scatter(d, 1, repeated.to(kCuda), src.to(kCuda)).cpu().tolist<float>(), flow::scatter(x, 1, repeated, src).tolist<float>());
  expect_close(flow::scatter_add(d, 1, repeated.to(kCuda), src.to(kCuda)).cpu(), flow::scatter_add(x, 1, repeated, src));
  EXPECT_EQ(flow::scatter(d, 0, flow::tensor(std::vector<int64_t>{3, 0, 1, 2, 0, 0}).reshape({1, 6}).to(kCuda), src.reshape({1, 8}).slice(1, 0, 6).to(kCuda))
                .cpu()
                .tolist<float>(),
            flow::scatter(x, 0, flow::tensor(std::vector<int64_t>{3, 0, 1, 2, 0, 0}).reshape({1, 6}), src.reshape({1, 8}).slice(1, 0, 6)).tolist<float>());
  // In place (a KV cache's write): the CUDA tensor itself changes, as the CPU one does.
  Tensor in_place = x.clone(), on_device = d.clone();
  flow::scatter_(in_place, 1, repeated, src);
  flow::scatter_(on_device, 1, repeated.to(kCuda), src.to(kCuda));
  EXPECT_EQ(on_device.cpu().tolist<float>(), in_place.tolist<float>());
  const Tensor bad = flow::tensor(std::vector<int64_t>{0, 6}).reshape({1, 2});
  EXPECT_THROW_MSG(flow::gather(d, 1, bad.to(kCuda)), "[gather] index 6 is out of bounds for dimension 1 with size 6");
  EXPECT_THROW_MSG(flow::scatter(d, 1, bad.to(kCuda), src.slice(0, 0, 1).to(kCuda)), "[scatter] index 6 is out of bounds for dimension 1 with size 6");
  const Tensor condition = flow::gt(x, 0.0), column = flow::randn({4, 1});
  EXPECT_EQ(flow::where(condition.to(kCuda), d, column.to(kCuda)).cpu().tolist<float>(), flow::where(condition, x, column).tolist<float>());
  EXPECT_EQ(flow::where(condition.to(kCuda), d, 0.0).cpu().tolist<float>(), flow::where(condition, x, 0.0).tolist<float>());
}

TEST(CudaTraining, CrossEntropyAndReluGradientsMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(24);
  const Tensor logits = flow::randn({8, 5}), target = flow::tensor(std::vector<int64_t>{0, 4, 2, 2, 1, 3, 0, -100});
  const Tensor leaf_cpu = logits.detach().requires_grad_(true), leaf_cuda = logits.to(kCuda).detach().requires_grad_(true);
  Tensor loss_cpu = flow::nn::functional::cross_entropy(flow::relu(leaf_cpu) * 2.0, target);
  Tensor loss_cuda = flow::nn::functional::cross_entropy(flow::relu(leaf_cuda) * 2.0, target.to(kCuda));
  expect_close(loss_cuda.cpu(), loss_cpu, 1e-5, 1e-6);
  loss_cpu.backward();
  loss_cuda.backward();
  ASSERT_TRUE(leaf_cuda.grad().defined());
  expect_close(leaf_cuda.grad().cpu(), leaf_cpu.grad(), 1e-5, 1e-6);
}

TEST(CudaTraining, SgdUpdateMatchesCpu) {
  REQUIRE_CUDA();
  for (const auto& options : {flow::optim::SGDOptions(0.1), flow::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01),
                              flow::optim::SGDOptions(0.05).momentum(0.9).nesterov(true)}) {
    flow::manual_seed(25);
    Tensor cpu_param = flow::randn({33, 7}).requires_grad_(true);
    Tensor cuda_param = cpu_param.detach().to(kCuda).requires_grad_(true);
    flow::optim::SGD cpu_sgd({cpu_param}, options), cuda_sgd({cuda_param}, options);
    for (int step = 0; step < 3; ++step) {
      const Tensor grad = flow::randn({33, 7});
      cpu_param.set_grad(grad);
      cuda_param.set_grad(grad.to(kCuda));
      cpu_sgd.step();
      cuda_sgd.step();
    }
    expect_close(cuda_param.cpu(), cpu_param, 1e-5, 1e-6);
  }
}

// Three steps of an MLP classifier with cross-entropy and momentum SGD: eager on CUDA, a Graph
// on CUDA and eager on the CPU agree on the losses and the trained parameters.
TEST(CudaTraining, EagerAndGraphTrainingStepsMatchCpu) {
  REQUIRE_CUDA();
  auto cpu_model = make_mlp(), cuda_model = make_mlp(), graph_model = make_mlp();
  cuda_model->to(kCuda);
  graph_model->to(kCuda);
  const auto options = flow::optim::SGDOptions(0.1).momentum(0.9);
  flow::optim::SGD cpu_sgd(cpu_model->parameters(), options), cuda_sgd(cuda_model->parameters(), options);
  test_graphs::TrainGraph graph(graph_model, std::make_shared<flow::optim::SGD>(graph_model->parameters(), options));
  flow::nn::CrossEntropyLoss loss_fn;
  flow::manual_seed(26);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = flow::randn({16, 1, 6, 6}), y = flow::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0});
    cpu_sgd.zero_grad();
    Tensor cpu_loss = loss_fn(cpu_model->forward(x), y);
    cpu_loss.backward();
    cpu_sgd.step();
    cuda_sgd.zero_grad();
    Tensor cuda_loss = loss_fn(cuda_model->forward(x.to(kCuda)), y.to(kCuda));
    cuda_loss.backward();
    cuda_sgd.step();
    const Tensor graph_loss = graph({x.to(kCuda), y.to(kCuda)}).at(0);
    expect_close(cuda_loss.cpu(), cpu_loss, 1e-5, 1e-5);
    expect_close(graph_loss.cpu(), cpu_loss, 1e-5, 1e-5);
  }
  expect_same_parameters(*cuda_model, *cpu_model, 1e-4);
  expect_same_parameters(*graph_model, *cpu_model, 1e-4);
  // Accuracy on the device: argmax and comparison stay there.
  const Tensor x = flow::randn({16, 1, 6, 6});
  EXPECT_EQ(cuda_model->forward(x.to(kCuda)).argmax(1).cpu().tolist<int64_t>(), cpu_model->forward(x).argmax(1).tolist<int64_t>());
}

// Graph::set_grad_scaler on CUDA: the scale's variables live on the device, and the scaled,
// checked and (on step 1, an inf input) skipped updates give the CPU Graph's scales and parameters.
TEST(CudaTraining, GraphGradScalerMatchesCpu) {
  REQUIRE_CUDA();
  auto cpu_model = make_mlp(), cuda_model = make_mlp();
  cuda_model->to(kCuda);
  const auto options = flow::optim::SGDOptions(0.1).momentum(0.9);
  test_graphs::TrainGraph cpu_graph(cpu_model, std::make_shared<flow::optim::SGD>(cpu_model->parameters(), options));
  test_graphs::TrainGraph cuda_graph(cuda_model, std::make_shared<flow::optim::SGD>(cuda_model->parameters(), options));
  const auto scaler_options = flow::amp::GradScalerOptions().init_scale(4096).growth_interval(2);
  auto cpu_scaler = std::make_shared<flow::amp::GradScaler>(scaler_options);
  auto cuda_scaler = std::make_shared<flow::amp::GradScaler>(scaler_options);
  cpu_graph.set_grad_scaler(cpu_scaler);
  cuda_graph.set_grad_scaler(cuda_scaler);
  flow::manual_seed(27);
  for (int step = 0; step < 5; ++step) {
    Tensor x = flow::randn({16, 1, 6, 6}).contiguous();
    if (step == 1) x.data_ptr<float>()[0] = std::numeric_limits<float>::infinity();
    const Tensor y = flow::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0});
    cpu_graph({x, y});
    cuda_graph({x.to(kCuda), y.to(kCuda)});
    EXPECT_EQ(cuda_scaler->get_scale(), cpu_scaler->get_scale()) << step;
  }
  EXPECT_EQ(cpu_scaler->get_scale(), 4096.0);  // backoff at step 1, growth after steps 2-3
  expect_same_parameters(*cuda_model, *cpu_model, 1e-4);
}

// A write through a view on CUDA: the same values and gradients as on the CPU (autograd's
// CopySlices runs as_strided and as_strided_scatter there).
TEST(CudaTraining, WritesThroughViewsMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(34);
  const Tensor w = flow::randn({4, 3}), x = flow::randn({2, 3}), c = flow::randn({4, 3});
  auto run = [&](const flow::Device& device) {
    Tensor weight = w.to(device).requires_grad_(), source = x.to(device).requires_grad_();
    Tensor y = weight * 2.0;
    Tensor earlier = y.select(0, 1);
    y.slice(0, 1, 3).copy_(source * 3.0);
    ((y * c.to(device)).sum() + earlier.sum()).backward();
    return std::vector<Tensor>{y.detach().cpu(), weight.grad().cpu(), source.grad().cpu()};
  };
  const std::vector<Tensor> on_cuda = run(kCuda), on_cpu = run(flow::kCPU);
  for (size_t i = 0; i < on_cpu.size(); ++i) expect_close(on_cuda[i], on_cpu[i], 1e-6, 1e-6);
}

// GPT-2 on CUDA: training steps of a small GPT-2 (AdamW) eagerly and as a Graph on the GPU give the
// CPU's losses and parameters, in float32 and with AMP (bfloat16 and float16 autocast, the Graph's
// enable_amp). Every test skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "common/language_model_graph.h"
#include "common/test_util.h"
#include "core/autocast.h"

using flow::Tensor;
namespace models = flow::models;

namespace {
const flow::Device kCuda("cuda:0");

models::GPT2Config small_config() { return models::GPT2Config().vocab_size(64).n_positions(16).n_embd(32).n_layer(2).n_head(4).dropout(0.0); }

// The same initial weights on every call.
std::shared_ptr<models::GPT2LMHeadModel> small_model() {
  flow::manual_seed(41);
  return std::make_shared<models::GPT2LMHeadModel>(small_config());
}

Tensor token_ids() {
  flow::manual_seed(42);
  return flow::randint(0, 64, {4, 16});
}

// One eager step: the loss, under autocast to `amp` when it is set.
double eager_step(models::GPT2LMHeadModel& model, flow::optim::Optimizer& optimizer, const Tensor& ids, std::optional<flow::DType> amp) {
  optimizer.zero_grad();
  Tensor loss;
  {
    const flow::autocast guard(amp.value_or(flow::kBFloat16), amp.has_value());
    loss = model.loss(ids, ids);
  }
  loss.backward();
  optimizer.step();
  return loss.item<double>();
}

void expect_same_parameters(models::GPT2LMHeadModel& cuda_model, models::GPT2LMHeadModel& cpu_model, double tolerance) {
  const auto on_cuda = cuda_model.named_parameters(), on_cpu = cpu_model.named_parameters();
  ASSERT_EQ(on_cuda.size(), on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    EXPECT_EQ(on_cuda[i].second.device(), kCuda) << on_cpu[i].first;
    EXPECT_EQ(on_cuda[i].second.dtype(), flow::kFloat32) << on_cpu[i].first;
    EXPECT_TRUE(flow::allclose(on_cuda[i].second.cpu(), on_cpu[i].second, tolerance, tolerance)) << on_cpu[i].first;
  }
}
}  // namespace

TEST(CudaGPT2, EagerAndGraphTrainingStepsMatchCpu) {
  REQUIRE_CUDA();
  auto cpu_model = small_model(), cuda_model = small_model(), graph_model = small_model();
  cuda_model->to(kCuda);
  graph_model->to(kCuda);
  const auto options = flow::optim::AdamWOptions(1e-2);
  flow::optim::AdamW cpu_optimizer(cpu_model->parameters(), options), cuda_optimizer(cuda_model->parameters(), options);
  test_graphs::LanguageModelTrainGraph graph(graph_model, std::make_shared<flow::optim::AdamW>(graph_model->parameters(), options));
  const Tensor ids = token_ids(), cuda_ids = ids.to(kCuda);
  for (int step = 0; step < 3; ++step) {
    const double cpu_loss = eager_step(*cpu_model, cpu_optimizer, ids, std::nullopt);
    EXPECT_NEAR(eager_step(*cuda_model, cuda_optimizer, cuda_ids, std::nullopt), cpu_loss, 1e-4 * cpu_loss) << "step " << step;
    EXPECT_NEAR(graph(cuda_ids, cuda_ids).at(0).item<double>(), cpu_loss, 1e-4 * cpu_loss) << "step " << step;
  }
  expect_same_parameters(*cuda_model, *cpu_model, 1e-4);
  expect_same_parameters(*graph_model, *cpu_model, 1e-4);
}

// AMP on CUDA: eager autocast and the Graph's enable_amp give the CPU's autocast losses within the
// 16-bit dtype's rounding, keep the parameters float32, and lower the loss.
TEST(CudaGPT2, MixedPrecisionTrainingMatchesCpuAutocast) {
  REQUIRE_CUDA();
  for (flow::DType amp : {flow::kBFloat16, flow::kFloat16}) {
    SCOPED_TRACE(flow::dtype_name(amp));
    auto cpu_model = small_model(), cuda_model = small_model(), graph_model = small_model();
    cuda_model->to(kCuda);
    graph_model->to(kCuda);
    const auto options = flow::optim::AdamWOptions(1e-2);
    flow::optim::AdamW cpu_optimizer(cpu_model->parameters(), options), cuda_optimizer(cuda_model->parameters(), options);
    test_graphs::LanguageModelTrainGraph graph(graph_model, std::make_shared<flow::optim::AdamW>(graph_model->parameters(), options));
    graph.config().enable_amp(true, amp);
    const Tensor ids = token_ids(), cuda_ids = ids.to(kCuda);
    std::vector<double> graph_losses;
    for (int step = 0; step < 6; ++step) {
      const double cpu_loss = eager_step(*cpu_model, cpu_optimizer, ids, amp);
      EXPECT_NEAR(eager_step(*cuda_model, cuda_optimizer, cuda_ids, amp), cpu_loss, 3e-2 * cpu_loss) << "step " << step;
      graph_losses.push_back(graph(cuda_ids, cuda_ids).at(0).item<double>());
      EXPECT_NEAR(graph_losses.back(), cpu_loss, 3e-2 * cpu_loss) << "step " << step;
    }
    EXPECT_LT(graph_losses.back(), 0.9 * graph_losses.front());
    for (const auto& [name, p] : graph_model->named_parameters()) EXPECT_EQ(p.dtype(), flow::kFloat32) << name;
  }
}

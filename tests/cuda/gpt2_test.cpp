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

models::GPT2Config small_config() {
  return models::GPT2Config().vocab_size(64).n_positions(16).n_embd(32).n_layer(2).n_head(4).dropout(0.0);
}

// The same initial weights on every call, on `device`.
std::shared_ptr<models::GPT2LMHeadModel> small_model(const flow::Device& device) {
  flow::manual_seed(41);
  auto model = std::make_shared<models::GPT2LMHeadModel>(small_config());
  model->to(device);
  return model;
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

// The same small GPT-2 trained three ways, with AdamW: eagerly on the CPU, eagerly on CUDA, and as
// a Graph on CUDA (its AMP from `amp`, as the eager steps' autocast).
struct ThreeTrainings {
  explicit ThreeTrainings(std::optional<flow::DType> amp_dtype = std::nullopt)
      : amp(amp_dtype),
        cpu_model(small_model(flow::kCPU)),
        cuda_model(small_model(kCuda)),
        graph_model(small_model(kCuda)),
        cpu_optimizer(cpu_model->parameters(), options),
        cuda_optimizer(cuda_model->parameters(), options),
        graph(graph_model, std::make_shared<flow::optim::AdamW>(graph_model->parameters(), options)) {
    if (amp) graph.config().enable_amp(true, *amp);
  }
  struct Losses {
    double cpu, cuda, graph;
  };
  Losses step() {
    Losses losses{};
    losses.cpu = eager_step(*cpu_model, cpu_optimizer, ids, amp);
    losses.cuda = eager_step(*cuda_model, cuda_optimizer, cuda_ids, amp);
    losses.graph = graph(cuda_ids, cuda_ids).at(0).item<double>();
    return losses;
  }

  const std::optional<flow::DType> amp;
  const flow::optim::AdamWOptions options = flow::optim::AdamWOptions(1e-2);
  const Tensor ids = token_ids(), cuda_ids = ids.to(kCuda);
  std::shared_ptr<models::GPT2LMHeadModel> cpu_model, cuda_model, graph_model;
  flow::optim::AdamW cpu_optimizer, cuda_optimizer;
  test_graphs::LanguageModelTrainGraph graph;
};

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
  ThreeTrainings runs;
  for (int step = 0; step < 3; ++step) {
    const ThreeTrainings::Losses losses = runs.step();
    EXPECT_NEAR(losses.cuda, losses.cpu, 1e-4 * losses.cpu) << "step " << step;
    EXPECT_NEAR(losses.graph, losses.cpu, 1e-4 * losses.cpu) << "step " << step;
  }
  expect_same_parameters(*runs.cuda_model, *runs.cpu_model, 1e-4);
  expect_same_parameters(*runs.graph_model, *runs.cpu_model, 1e-4);
}

// AMP on CUDA: eager autocast and the Graph's enable_amp give the CPU's autocast losses within the
// 16-bit dtype's rounding, keep the parameters float32, and lower the loss.
TEST(CudaGPT2, MixedPrecisionTrainingMatchesCpuAutocast) {
  REQUIRE_CUDA();
  for (flow::DType amp : {flow::kBFloat16, flow::kFloat16}) {
    SCOPED_TRACE(flow::dtype_name(amp));
    ThreeTrainings runs(amp);
    std::vector<double> graph_losses;
    for (int step = 0; step < 6; ++step) {
      const ThreeTrainings::Losses losses = runs.step();
      EXPECT_NEAR(losses.cuda, losses.cpu, 3e-2 * losses.cpu) << "step " << step;
      EXPECT_NEAR(losses.graph, losses.cpu, 3e-2 * losses.cpu) << "step " << step;
      graph_losses.push_back(losses.graph);
    }
    EXPECT_LT(graph_losses.back(), 0.9 * graph_losses.front());
    for (const auto& [name, p] : runs.graph_model->named_parameters()) EXPECT_EQ(p.dtype(), flow::kFloat32) << name;
  }
}

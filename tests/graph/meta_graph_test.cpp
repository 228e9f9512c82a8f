// A Graph on meta tensors traces, optimises and plans exactly as it does on CPU tensors, without
// memory behind any value: what flow_plan_stats measures models with.
#include <gtest/gtest.h>

#include "common/graphs.h"
#include "common/models.h"
#include "common/test_util.h"
#include "optim/optimizer.h"

namespace {

std::vector<std::string> op_sequence(const flow::graph::proto::Job& job) {
  std::vector<std::string> ops;
  for (const auto& node : job.nodes()) ops.push_back(node.op());
  return ops;
}

}  // namespace

TEST(MetaGraph, TrainingPlanEqualsTheCpuPlan) {
  const flow::Tensor images = flow::randn({16, 1, 28, 28});
  const flow::Tensor labels = flow::randint(0, 10, {16});
  auto cpu_model = test_models::cnn();
  test_graphs::TrainGraph cpu_graph(cpu_model, std::make_shared<flow::optim::Adam>(cpu_model->parameters(), flow::optim::AdamOptions(1e-3)));
  cpu_graph(images, labels);

  std::shared_ptr<flow::nn::Sequential> meta_model;
  {
    flow::DefaultDeviceGuard meta(flow::kMeta);
    meta_model = test_models::cnn();
  }
  for (const auto& parameter : meta_model->parameters()) ASSERT_TRUE(parameter.device().is_meta());
  test_graphs::TrainGraph meta_graph(meta_model, std::make_shared<flow::optim::Adam>(meta_model->parameters(), flow::optim::AdamOptions(1e-3)));
  const flow::TensorList loss = meta_graph(images.to(flow::kMeta), labels.to(flow::kMeta));
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_TRUE(loss[0].device().is_meta());
  EXPECT_EQ(loss[0].dim(), 0);

  EXPECT_EQ(op_sequence(meta_graph.job()), op_sequence(cpu_graph.job()));
  ASSERT_EQ(meta_graph.plan().block_bytes.size(), 1u);
  EXPECT_GT(meta_graph.plan().block_bytes.at("meta"), 0);
  EXPECT_EQ(meta_graph.plan().block_bytes.at("meta"), cpu_graph.plan().block_bytes.at("cpu"));
  EXPECT_EQ(meta_graph.plan().total_buffer_bytes, cpu_graph.plan().total_buffer_bytes);
  // Running again runs no kernel either.
  EXPECT_TRUE(meta_graph(images.to(flow::kMeta), labels.to(flow::kMeta))[0].device().is_meta());
}

// nn::Graph::explain(): the report of what compiling did, checked against the Job and Plan the
// graph runs: traced ops, each pass's records, signatures and recompile reasons, phase times and
// planned memory.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "common/models.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/explain.h"
#include "graph/graph.h"
#include "graph/training/rewrites.h"
#include "graph_helpers.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
namespace graph = flow::graph;
using flow::Tensor;
using flow::TensorList;

using graph_test::batch;
using graph_test::count_op;
using graph_test::EvalGraph;
using graph_test::make_mlp;
using graph_test::TrainGraph;
using test_graphs::PredictGraph;

namespace {

const flow::Shape kFull{64, 1, 28, 28};
const flow::Shape kPartial{32, 1, 28, 28};

// A constant branch to fold, a duplicate to merge and a dead branch to drop.
struct FoldMergeDropGraph : nn::Graph {
  TensorList build(const TensorList& in) override {
    const Tensor offset = flow::ones({8}) * 3;
    const Tensor a = flow::relu(in[0]);
    const Tensor b = flow::relu(in[0]);
    (void)flow::exp(in[0]);
    return {a + b + offset};
  }
};

std::set<std::string> node_names(const graph::proto::Job& job) {
  std::set<std::string> names;
  for (const auto& node : job.nodes()) names.insert(node.name());
  return names;
}

const graph::PassRecord& pass_record(const graph::PlanExplanation& plan, const std::string& pass) {
  for (const auto& record : plan.log.passes) {
    if (record.pass == pass) return record;
  }
  throw std::runtime_error("no record of pass " + pass);
}

// The pass fused `count` pairs, each into a `node_op` node the optimised Job holds, made of a
// `first` node and then a `second` one.
void expect_fused_pairs(const graph::PassRecord& record, const graph::proto::Job& job, size_t count, const std::string& node_op,
                        const std::string& first, const std::string& second) {
  ASSERT_EQ(record.fused.size(), count);
  const std::set<std::string> final_nodes = node_names(job);
  for (const auto& group : record.fused) {
    EXPECT_EQ(group.node.op, node_op);
    EXPECT_TRUE(final_nodes.count(group.node.name)) << group.node.name;
    ASSERT_EQ(group.members.size(), 2u);
    EXPECT_EQ(group.members[0].op, first);
    EXPECT_EQ(group.members[1].op, second);
  }
}

std::string printed(const graph::ExplainReport& report) {
  std::ostringstream out;
  out << report;
  return out.str();
}

// Every pass's counts chain from the traced Job to the optimised one, its node differences add
// up, and whatever it says it removed it did remove.
void expect_consistent_passes(const graph::PlanExplanation& plan, const graph::proto::Job& job) {
  int64_t nodes = plan.log.traced_nodes;
  for (const auto& record : plan.log.passes) {
    EXPECT_EQ(record.nodes_before, nodes) << record.pass;
    EXPECT_EQ(record.nodes_after, record.nodes_before - static_cast<int64_t>(record.removed.size()) + static_cast<int64_t>(record.added.size()))
        << record.pass;
    EXPECT_GE(record.seconds, 0) << record.pass;
    const std::set<std::string> removed(record.removed.begin(), record.removed.end());
    for (const auto& eliminated : record.eliminated) EXPECT_TRUE(removed.count(eliminated.node.name)) << record.pass << " " << eliminated.node.name;
    for (const auto& group : record.fused) {
      for (const auto& member : group.members) EXPECT_TRUE(removed.count(member.name)) << record.pass << " " << member.name;
    }
    nodes = record.nodes_after;
  }
  EXPECT_EQ(nodes, job.nodes_size());
  EXPECT_EQ(plan.nodes_after_passes, job.nodes_size());
}

}  // namespace

TEST(Explain, BeforeTheFirstCallIsAnError) {
  EvalGraph graph(make_mlp());
  EXPECT_THROW(graph.explain(), flow::Error);
}

TEST(Explain, MlpReportsTracedOpsAndTheLinearReluFusion) {
  EvalGraph graph(make_mlp());
  graph.eval();
  graph(flow::randn(kFull));
  const graph::ExplainReport report = graph.explain();
  ASSERT_EQ(report.plans.size(), 1u);
  EXPECT_EQ(report.graph, graph.name());
  const graph::PlanExplanation& plan = report.plans[0];
  EXPECT_EQ(plan.log.traced_ops.at("linear"), 3);
  EXPECT_EQ(plan.log.traced_ops.at("relu"), 2);
  EXPECT_EQ(plan.traced_op_count(), 6);  // the flatten too
  EXPECT_TRUE(plan.log.guard_failures.empty());
  expect_consistent_passes(plan, graph.job());

  // Each hidden linear and its relu run as one fused_linear that the optimised Job holds.
  const graph::PassRecord& fusion = pass_record(plan, "elementwise_fusion");
  ASSERT_NO_FATAL_FAILURE(expect_fused_pairs(fusion, graph.job(), 2, "fused_linear", "linear", "relu"));
  const std::set<std::string> final_nodes = node_names(graph.job());
  for (const auto& group : fusion.fused) {
    for (const auto& member : group.members) EXPECT_FALSE(final_nodes.count(member.name)) << member.name;
  }
  EXPECT_EQ(plan.ops_after_passes.at("fused_linear"), count_op(graph.job(), "fused_linear"));
  EXPECT_EQ(plan.ops_after_passes.count("relu"), 0u);

  const std::string text = printed(report);
  EXPECT_NE(text.find("Plan 0: input signature " + graph::signature_str(graph.compiled_signature(0))), std::string::npos) << text;
  EXPECT_NE(text.find("fused " + fusion.fused[0].node.name + " (fused_linear) <- " + fusion.fused[0].members[0].name + " (linear), "),
            std::string::npos)
      << text;
}

TEST(Explain, FoldedMergedAndDeadNodesMatchTheJob) {
  FoldMergeDropGraph graph;
  flow::manual_seed(0);
  graph(flow::randn({4, 8}));
  const graph::PlanExplanation plan = graph.explain().plans.at(0);
  expect_consistent_passes(plan, graph.job());

  const graph::PassRecord& folding = pass_record(plan, "constant_folding");
  ASSERT_EQ(folding.folded.size(), 2u);  // ones, then the product with 3
  EXPECT_EQ(folding.folded[1].op, "mul_scalar");
  EXPECT_EQ(folding.nodes_before, folding.nodes_after);  // folded in place

  const graph::PassRecord& cse = pass_record(plan, "common_subexpression_elimination");
  ASSERT_EQ(cse.eliminated.size(), 1u);
  EXPECT_EQ(cse.eliminated[0].node.op, "relu");
  EXPECT_EQ(cse.eliminated[0].reason.rfind("duplicate of ", 0), 0u);
  EXPECT_EQ(cse.removed.size(), 1u);

  const graph::PassRecord& dce = pass_record(plan, "dead_code_elimination");
  std::vector<std::string> eliminated;
  bool exp_dropped = false;
  for (const auto& node : dce.eliminated) {
    eliminated.push_back(node.node.name);
    exp_dropped = exp_dropped || (node.node.op == "exp" && node.reason == "dead");
  }
  EXPECT_TRUE(exp_dropped);
  EXPECT_EQ(eliminated, dce.removed);
  EXPECT_EQ(plan.log.traced_ops.at("exp"), 1);
  EXPECT_EQ(count_op(graph.job(), "exp"), 0);
}

TEST(Explain, ConvBatchNormFoldingAndPoolRewritesAreListed) {
  flow::manual_seed(0);
  PredictGraph graph(test_models::cnn());
  graph(flow::randn({2, 1, 28, 28}));
  const graph::PlanExplanation plan = graph.explain().plans.at(0);
  EXPECT_EQ(plan.log.traced_ops.at("conv2d"), 2);
  EXPECT_EQ(plan.log.traced_ops.at("batch_norm_eval"), 2);
  expect_consistent_passes(plan, graph.job());

  ASSERT_NO_FATAL_FAILURE(
      expect_fused_pairs(pass_record(plan, "conv_batch_norm_folding"), graph.job(), 2, "conv2d", "conv2d", "batch_norm_eval"));
  EXPECT_EQ(plan.ops_after_passes.count("batch_norm_eval"), 0u);

  const graph::PassRecord& pools = pass_record(plan, "unused_pool_indices_elimination");
  ASSERT_EQ(pools.rewritten.size(), 2u);
  for (const auto& node : pools.rewritten) EXPECT_EQ(node.op, "max_pool2d_inference");
  EXPECT_NE(printed(graph.explain()).find("rewritten " + pools.rewritten[0].name + " as max_pool2d_inference"), std::string::npos);
}

TEST(Explain, BatchSizeChangeGivesTwoSignaturesAndTheReason) {
  auto net = make_mlp();
  TrainGraph graph(net, std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.05).momentum(0.9)));
  for (const flow::Shape& shape : {kFull, kPartial}) {
    auto [x, y] = batch(0, shape);
    graph(x, y);
  }
  const graph::ExplainReport report = graph.explain();
  ASSERT_EQ(report.plans.size(), 2u);
  for (int64_t i = 0; i < 2; ++i) {
    const graph::PlanExplanation& plan = report.plans[static_cast<size_t>(i)];
    EXPECT_EQ(plan.index, i);
    EXPECT_TRUE(plan.signature == graph.compiled_signature(i));
    EXPECT_GE(plan.log.trace_seconds, 0);
    EXPECT_GE(plan.log.passes_seconds, 0);
    EXPECT_GE(plan.log.plan_seconds, 0);
    EXPECT_GE(plan.log.runtime_seconds, 0);
    EXPECT_GE(plan.compile_seconds, 0);
  }
  const std::string reason = "input 0 size (64, 1, 28, 28) -> (32, 1, 28, 28)";
  EXPECT_TRUE(report.plans[0].log.guard_failures.empty());
  EXPECT_EQ(report.plans[1].log.guard_failures, std::vector<std::string>{reason});
  const std::string text = printed(report);
  EXPECT_NE(text.find("2 compiled plans"), std::string::npos) << text;
  EXPECT_NE(text.find("recompiled: plan 0 guard failed: " + reason), std::string::npos) << text;

  // The optimizer's update arithmetic is fused into in-place writes of the variables.
  bool update_fused = false;
  for (const auto& group : pass_record(report.plans[1], "elementwise_fusion").fused) {
    update_fused = update_fused || (group.node.op == "fused_elementwise_inplace" && group.members.back().op == "assign");
  }
  EXPECT_TRUE(update_fused);
  expect_consistent_passes(report.plans[1], graph.job());
}

// The training rewrites a plan applied, in the pipeline's order (graph/training/rewrites.h):
// none for inference, the optimizer step for training, more as the config turns them on.
TEST(Explain, ListsTheTrainingRewritesEachPlanApplied) {
  auto predict_net = make_mlp();
  PredictGraph predict(predict_net);
  predict(batch(0, kFull).first);
  EXPECT_TRUE(predict.explain().plans.at(0).log.training_rewrites.empty());
  EXPECT_NE(printed(predict.explain()).find("training rewrites: none"), std::string::npos);

  auto net = make_mlp();
  TrainGraph plain(net, std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.05)));
  auto [x, y] = batch(0, kFull);
  plain(x, y);
  EXPECT_EQ(plain.explain().plans.at(0).log.training_rewrites, std::vector<std::string>{"optimizer_step"});

  auto scaled_net = make_mlp();
  TrainGraph scaled(scaled_net, std::make_shared<optim::SGD>(scaled_net->parameters(), optim::SGDOptions(0.05)));
  scaled.config().enable_amp(true).set_gradient_accumulation_steps(2);
  scaled.set_grad_scaler(std::make_shared<flow::amp::GradScaler>());
  scaled(x, y);
  const std::vector<std::string> expected{"amp", "gradient_accumulation", "loss_scaling", "optimizer_step"};
  EXPECT_EQ(scaled.explain().plans.at(0).log.training_rewrites, expected);
  EXPECT_NE(printed(scaled.explain()).find("training rewrites: amp, gradient_accumulation, loss_scaling, optimizer_step"),
            std::string::npos);
  // The list's order is the pipeline's.
  std::vector<std::string> pipeline;
  for (const auto& rewrite : graph::training::training_rewrites()) pipeline.push_back(rewrite.name);
  EXPECT_EQ(pipeline, (std::vector<std::string>{"amp", "gradient_accumulation", "loss_scaling", "gradient_buckets", "gradient_clipping",
                                                "optimizer_step", "pipeline_schedule"}));
}

TEST(Explain, MemoryIsThePlansPlannedBytesAndReuseIsReal) {
  auto net = make_mlp();
  TrainGraph graph(net, std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.05)));
  auto [x, y] = batch(0, kFull);
  graph(x, y);
  const graph::PlanExplanation plan = graph.explain().plans.at(0);
  const graph::Plan& planned = graph.plan();
  EXPECT_EQ(plan.planned_bytes, planned.block_bytes);
  EXPECT_EQ(plan.bytes_without_reuse, planned.total_buffer_bytes);
  EXPECT_EQ(plan.planned_buffers, static_cast<int64_t>(planned.buffers.size()));
  ASSERT_FALSE(plan.reused.empty());
  for (const auto& reuse : plan.reused) {
    const graph::PlannedBuffer& buffer = planned.buffers.at(reuse.value);
    const graph::PlannedBuffer& earlier = planned.buffers.at(reuse.reuses);
    EXPECT_LT(earlier.last, buffer.first) << reuse.value;
    EXPECT_LT(earlier.offset, buffer.offset + buffer.nbytes) << reuse.value;
    EXPECT_LT(buffer.offset, earlier.offset + earlier.nbytes) << reuse.value;
    EXPECT_EQ(reuse.nbytes, buffer.nbytes);
  }
  const std::string text = printed(graph.explain());
  EXPECT_NE(text.find("planned cpu " + std::to_string(planned.block_bytes.at("cpu")) + " bytes"), std::string::npos) << text;
}

TEST(Explain, SaysWhetherAndHowEachPlanRunsFrozen) {
  flow::manual_seed(2);
  auto net = test_models::cnn();
  test_models::warm_up_batch_norm(*net, {4, 1, 28, 28});
  PredictGraph predict(net);
  const Tensor x = flow::randn({4, 1, 28, 28});
  predict(x);
  graph::PlanExplanation plan = predict.explain().plans.at(0);
  EXPECT_TRUE(plan.freeze_refusal.empty());
  ASSERT_TRUE(plan.ran_frozen);
  EXPECT_EQ(plan.frozen_blocked_steps, predict.frozen_blocked_steps());
  EXPECT_GT(plan.frozen_blocked_steps, 0);
  // The frozen Job computed the conv + batch-norm fold once: no batch norm, no fold node left.
  EXPECT_EQ(plan.frozen_ops.count("batch_norm_eval"), 0u);
  EXPECT_EQ(plan.frozen_ops.at("conv2d"), 2);
  EXPECT_GT(plan.ops_after_passes.size(), plan.frozen_ops.size());
  const std::string text = printed(predict.explain());
  EXPECT_NE(text.find("frozen inference: its latest call ran frozen: "), std::string::npos) << text;

  {
    flow::autograd::NoGradGuard no_grad;
    net->parameters().front().copy_(net->parameters().front() * 0.5);
  }
  predict(x);
  plan = predict.explain().plans.at(0);
  EXPECT_FALSE(plan.ran_frozen);
  EXPECT_TRUE(plan.frozen_ops.empty());

  auto mlp = make_mlp();
  TrainGraph train(mlp, std::make_shared<optim::SGD>(mlp->parameters(), optim::SGDOptions(0.1)));
  const auto [images, labels] = batch(0, kFull);
  train(images, labels);
  EXPECT_EQ(train.explain().plans.at(0).freeze_refusal, "a training graph (it has an optimizer)");
  const std::string train_text = printed(train.explain());
  EXPECT_NE(train_text.find("frozen inference: never: a training graph"), std::string::npos) << train_text;

  EvalGraph off(net);
  off.config().enable_inference_freezing(false);
  off(x);
  EXPECT_EQ(off.explain().plans.at(0).freeze_refusal, "turned off (config().enable_inference_freezing(false))");
}

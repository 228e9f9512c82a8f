// Passes on small traced Jobs: dead-code elimination, CSE, constant folding; and the memory plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "core/ops/all.h"
#include "graph/passes.h"
#include "graph/tracer.h"
#include "graph_helpers.h"
#include "job/plan.h"

namespace graph = flow::graph;
using flow::Tensor;
using graph_test::count_op;

namespace {

// Traces fn(inputs) into a Job whose outputs are fn's results.
struct Traced {
  graph::proto::Job job;
  std::map<std::string, Tensor> fixed;
};

Traced trace(const std::vector<Tensor>& examples, const std::function<flow::TensorList(const flow::TensorList&)>& fn) {
  std::ostringstream log;
  graph::Tracer tracer("job", {}, 0, log);
  {
    flow::InterpreterGuard guard(&tracer);
    flow::TensorList inputs;
    for (size_t i = 0; i < examples.size(); ++i) inputs.push_back(tracer.add_input(static_cast<int>(i), examples[i]));
    const flow::TensorList outputs = fn(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) tracer.add_output(static_cast<int>(i), outputs[i]);
  }
  tracer.release();
  Traced traced;
  traced.job.Swap(&tracer.job());
  traced.fixed = tracer.captured();
  return traced;
}

}  // namespace

TEST(Passes, DeadCodeEliminationRemovesUnusedBranches) {
  auto traced = trace({flow::randn({4})}, [](const flow::TensorList& in) {
    const Tensor unused = flow::exp(in[0]) * 3.0;  // never reaches an output
    (void)unused;
    return flow::TensorList{flow::relu(in[0])};
  });
  EXPECT_EQ(count_op(traced.job, "exp"), 1);
  graph::PassContext context{traced.fixed};
  graph::dead_code_elimination(traced.job, context);
  EXPECT_EQ(count_op(traced.job, "exp"), 0);
  EXPECT_EQ(count_op(traced.job, "mul_scalar"), 0);
  EXPECT_EQ(count_op(traced.job, "relu"), 1);
  EXPECT_EQ(count_op(traced.job, graph::kInputOp), 1);
}

TEST(Passes, DeadCodeEliminationKeepsInPlaceWrites) {
  Tensor state = flow::zeros({4});
  auto traced = trace({flow::randn({4})}, [&](const flow::TensorList& in) {
    state.copy_(in[0] * 2.0);  // a side effect nobody reads
    return flow::TensorList{in[0] + 1.0};
  });
  graph::PassContext context{traced.fixed};
  graph::dead_code_elimination(traced.job, context);
  EXPECT_EQ(count_op(traced.job, "assign"), 1);
  EXPECT_EQ(count_op(traced.job, "mul_scalar"), 1);
}

TEST(Passes, MaxPoolIndicesNobodyReadsAreNotComputed) {
  const flow::TensorList examples{flow::randn({2, 3, 8, 8})};
  const Tensor scale = flow::ones({1}).requires_grad_();  // a parameter: the pool's input needs a gradient
  auto pool = [&](const flow::TensorList& in) { return flow::max_pool2d(in[0] * scale, {2, 2}); };
  auto forward_only = trace(examples, [&](const flow::TensorList& in) { return flow::TensorList{pool(in)}; });
  EXPECT_EQ(count_op(forward_only.job, "max_pool2d"), 1);  // traced with a gradient to take ...
  graph::PassContext context{forward_only.fixed};
  graph::unused_pool_indices_elimination(forward_only.job, context);
  EXPECT_EQ(count_op(forward_only.job, "max_pool2d"), 0);  // ... which nothing takes
  EXPECT_EQ(count_op(forward_only.job, "max_pool2d_inference"), 1);

  auto with_backward = trace(examples, [&](const flow::TensorList& in) {
    return flow::TensorList{flow::autograd::grad({flow::sum(pool(in))}, {scale})[0]};
  });
  graph::PassContext backward_context{with_backward.fixed};
  graph::unused_pool_indices_elimination(with_backward.job, backward_context);
  EXPECT_EQ(count_op(with_backward.job, "max_pool2d"), 1);  // the backward reads the indices
  EXPECT_EQ(count_op(with_backward.job, "max_pool2d_inference"), 0);
}

TEST(Passes, CommonSubexpressionEliminationMergesDuplicates) {
  auto traced = trace({flow::randn({4}), flow::randn({4})}, [](const flow::TensorList& in) {
    const Tensor a = flow::exp(in[0] + in[1]);
    const Tensor b = flow::exp(in[0] + in[1]);
    const Tensor c = flow::exp(in[1] + in[0]);  // different operand order: not the same node
    const Tensor noise1 = flow::rand({4});
    const Tensor noise2 = flow::rand({4});
    return flow::TensorList{a * b + c, noise1 - noise2};
  });
  graph::PassContext context{traced.fixed};
  EXPECT_EQ(count_op(traced.job, "add"), 4);
  graph::common_subexpression_elimination(traced.job, context);
  EXPECT_EQ(count_op(traced.job, "add"), 3);  // a and b share one add; c and the final sum stay
  EXPECT_EQ(count_op(traced.job, "exp"), 2);
  EXPECT_EQ(count_op(traced.job, "uniform"), 2) << "random ops are never merged";
}

TEST(Passes, ConstantFoldingEvaluatesConstantSubgraphsOnce) {
  const Tensor weight = flow::tensor(std::vector<float>{1, 2, 3, 4});
  auto traced = trace({flow::randn({4})}, [&](const flow::TensorList& in) {
    const Tensor scale = flow::exp(weight * 0.5) + flow::ones({4});  // inputs all constant
    return flow::TensorList{in[0] * scale};
  });
  graph::PassContext context{traced.fixed};
  graph::constant_folding(traced.job, context);
  graph::dead_code_elimination(traced.job, context);
  EXPECT_EQ(count_op(traced.job, "exp"), 0);
  EXPECT_EQ(count_op(traced.job, "full"), 0);
  EXPECT_EQ(count_op(traced.job, "mul"), 1);
  // The folded value feeding the remaining mul is exp(w/2) + 1.
  const auto& mul = *std::find_if(traced.job.nodes().begin(), traced.job.nodes().end(), [](const auto& n) { return n.op() == "mul"; });
  const Tensor folded = context.fixed.at(graph::parse_value_name(mul.inputs(1)).first);
  const auto values = folded.tolist<float>();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(values[i], std::exp(0.5 * (i + 1)) + 1.0, 1e-5);
}

TEST(Passes, PassManagerRunsInOrderAndDumps) {
  auto traced = trace({flow::randn({4})}, [](const flow::TensorList& in) {
    return flow::TensorList{flow::relu(in[0]) + flow::relu(in[0])};
  });
  graph::PassContext context{traced.fixed};
  std::ostringstream log;
  graph::default_passes().run(traced.job, context, 3, &log);
  // CSE leaves one relu, which fusion then merges with the add.
  EXPECT_EQ(count_op(traced.job, "relu"), 0);
  EXPECT_EQ(count_op(traced.job, "fused_elementwise"), 1);
  const std::string text = log.str();
  EXPECT_LT(text.find("pass constant_folding"), text.find("pass common_subexpression_elimination"));
  EXPECT_LT(text.find("pass dead_code_elimination"), text.find("pass elementwise_fusion"));
  const size_t after_cse = text.find("job after common_subexpression_elimination");
  const size_t next_dump = text.find("job after", after_cse + 1);
  ASSERT_NE(text.find("job after dead_code_elimination"), std::string::npos);
  const std::string cse_dump = text.substr(after_cse, next_dump - after_cse);
  EXPECT_NE(cse_dump.find("op: \"relu\""), std::string::npos) << "the Job is dumped in protobuf text form";
  EXPECT_EQ(cse_dump.find("op: \"relu\""), cse_dump.rfind("op: \"relu\"")) << "CSE merged the two relus";
}

TEST(Plan, BuffersWithOverlappingLifetimesNeverShareMemory) {
  auto traced = trace({flow::randn({256})}, [](const flow::TensorList& in) {
    Tensor x = in[0];
    for (int i = 0; i < 6; ++i) x = flow::relu(x * 2.0) + 1.0;  // a chain: each buffer dies soon
    return flow::TensorList{x};
  });
  const graph::Plan plan = graph::make_plan(traced.job);
  ASSERT_GE(plan.buffers.size(), 10u);
  int64_t peak = 0;
  for (const auto& [device, bytes] : plan.block_bytes) peak += bytes;
  EXPECT_LT(peak, plan.total_buffer_bytes / 3) << plan.summary();
  for (const auto& [a_name, a] : plan.buffers) {
    for (const auto& [b_name, b] : plan.buffers) {
      if (a_name == b_name) continue;
      const bool alive_together = a.first <= b.last && b.first <= a.last;
      const bool overlap = a.offset < b.offset + b.nbytes && b.offset < a.offset + a.nbytes;
      EXPECT_FALSE(alive_together && overlap) << a_name << " and " << b_name;
    }
  }
  // The graph output's buffer is handed to the caller, so it is not planned.
  EXPECT_EQ(plan.buffers.count(traced.job.nodes(traced.job.nodes_size() - 1).inputs(0)), 0u);
}

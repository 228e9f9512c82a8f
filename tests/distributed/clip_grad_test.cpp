// Gradient clipping of global parameters on 2 ranks (flow_distributed_tests --ranks=2): eager
// clip_grad_norm_ and clip_grad_value_ on split, broadcast and partial-sum gradients, and a
// data-parallel Graph that clips (also under ZeRO-2, whose gradients are split), each against one
// process on the whole tensors (which every rank computes itself).
#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "common/ddp_reference.h"
#include "common/graphs.h"
#include "core/global/global_tensor.h"
#include "core/ops/all.h"
#include "distributed/rank_fixture.h"
#include "nn/utils/clip_grad.h"
#include "optim/optimizer.h"

namespace flow::distributed::testing {
namespace {

using ClipGradParallel = RankTest;

const NdSbp kB{sbp::broadcast()};
const NdSbp kS0{sbp::split(0)};

void expect_close(const Tensor& actual, const Tensor& expected, double tolerance) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const std::vector<double> a = actual.tolist<double>(), e = expected.tolist<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], tolerance * (1 + std::abs(e[i]))) << "element " << i;
}

// w (6, 4), b (4) and c (4, no gradient); loss = sum((x @ w + b)^2) with x (5, 6).
struct Params {
  Tensor w, b, c;
  TensorList all() const { return {w, b, c}; }
};

Params backward_of_loss(const Params& p, const Tensor& x) {
  sum(pow(matmul(x, p.w) + p.b, 2.0)).backward();
  return p;
}

TEST_F(ClipGradParallel, ClipGradNormOfGlobalGradientsIsTheNormOfTheLogicalGradients) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  manual_seed(3);
  const Tensor w = randn({6, 4}), b = randn({4}), c = randn({4}), x = randn({5, 6});
  // Model parallel (w split, its gradient split) and data parallel (x split: the broadcast
  // parameters' gradients are partial sums).
  for (const auto& [w_sbp, x_sbp] : std::vector<std::pair<NdSbp, NdSbp>>{{kS0, kB}, {kB, kS0}}) {
    for (double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
      SCOPED_TRACE("w " + nd_sbp_str(w_sbp) + ", x " + nd_sbp_str(x_sbp) + ", norm_type " + std::to_string(norm_type));
      const Params local = backward_of_loss({w.clone().requires_grad_(), b.clone().requires_grad_(), c.clone().requires_grad_()}, x);
      const Params global = backward_of_loss({from_whole(w, placement, w_sbp).requires_grad_(), from_whole(b, placement, kB).requires_grad_(),
                                              from_whole(c, placement, kB).requires_grad_()},
                                             from_whole(x, placement, x_sbp));
      ASSERT_TRUE(global.w.grad().is_global());
      if (x_sbp == kS0) {
        EXPECT_TRUE(global.b.grad().sbp() == NdSbp{sbp::partial_sum()});
      }
      const NdSbp b_grad_sbp = global.b.grad().sbp();
      // Far above max_norm 1: every gradient is scaled.
      const Tensor expected = nn::utils::clip_grad_norm_(local.all(), 1.0, norm_type);
      const Tensor total = nn::utils::clip_grad_norm_(global.all(), 1.0, norm_type);
      ASSERT_TRUE(total.is_global());
      EXPECT_GT(expected.item<double>(), 10);
      EXPECT_NEAR(total.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>());
      expect_close(global.w.grad(), local.w.grad(), 1e-5);
      expect_close(global.b.grad(), local.b.grad(), 1e-5);
      EXPECT_FALSE(global.c.grad().defined());
      EXPECT_TRUE(global.b.grad().sbp() == b_grad_sbp);  // scaled in place
      nn::utils::clip_grad_value_(local.all(), 0.05);
      nn::utils::clip_grad_value_(global.all(), 0.05);
      expect_close(global.w.grad(), local.w.grad(), 1e-5);
      expect_close(global.b.grad(), local.b.grad(), 1e-5);
    }
  }
}

TEST_F(ClipGradParallel, DataParallelGraphWithClippingEqualsOneProcess) {
  constexpr double kLr = 0.1, kMaxNorm = 0.1;
  const auto batches = flow::testing::make_ddp_batches(8, 64, 11);
  auto reference = flow::testing::make_ddp_mlp(0);
  for (const auto& batch : batches) {
    flow::testing::ddp_loss(*reference, batch).backward();
    EXPECT_GT(nn::utils::clip_grad_norm_(reference->parameters(), kMaxNorm).item<double>(), kMaxNorm);  // every step clips
    flow::testing::sgd_step(*reference, kLr);
  }

  const Placement placement = Placement::all(DeviceType::kCPU);
  for (int64_t zero_stage : {0, 2}) {
    SCOPED_TRACE("ZeRO stage " + std::to_string(zero_stage));
    auto model = flow::testing::make_ddp_mlp(0);
    model->to_global(placement, kB);
    test_graphs::TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(kLr).clip_grad_max_norm(kMaxNorm)));
    if (zero_stage > 0) graph.config().enable_zero(zero_stage);
    for (const auto& batch : batches) graph(from_whole(batch.data, placement, kS0), from_whole(batch.target, placement, kS0));
    EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), flow::testing::kSplitBatchTolerance);
    EXPECT_EQ(graph.explain().plans.at(0).log.training_rewrites,
              (std::vector<std::string>{"gradient_buckets", "gradient_clipping", "optimizer_step"}));
    // Clipping adds no collective to plain DP (its gradients are broadcast once reduced); the
    // split gradients of ZeRO-2 all-reduce one 0-d sum of squares per parameter (6).
    std::map<std::string, int> collectives;
    for (const auto& node : graph.job().nodes()) {
      if (node.op().rfind("comm_", 0) == 0) ++collectives[node.op()];
    }
    const std::map<std::string, int> expected =
        zero_stage == 0 ? std::map<std::string, int>{{"comm_all_reduce", 3}}
                        : std::map<std::string, int>{{"comm_all_gather", 1}, {"comm_all_reduce", 2 + 6}, {"comm_reduce_scatter", 1}};
    EXPECT_EQ(collectives, expected);
  }
}

}  // namespace
}  // namespace flow::distributed::testing

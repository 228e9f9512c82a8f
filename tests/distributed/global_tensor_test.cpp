// Global tensors on 2 and 4 ranks (flow_distributed_tests --ranks=N): creation, every boxing
// transition, eager SPMD ops and their gradients, each against the same computation in one
// process (every rank computes the single-process reference itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "autograd/engine.h"
#include "common/test_util.h"
#include "core/global/buckets.h"
#include "core/ops/all.h"
#include "core/ops/comm.h"
#include "distributed/rank_fixture.h"
#include "nn/functional.h"

namespace flow {
// gtest prints sbps by name.
void PrintTo(const Sbp& sbp, std::ostream* out) { *out << sbp.str(); }
}  // namespace flow

namespace flow::distributed::testing {
namespace {

using GlobalTensor = RankTest;

void expect_equal(const Tensor& actual, const Tensor& expected, double tolerance = 0) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const std::vector<double> a = actual.tolist<double>(), e = expected.tolist<double>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], tolerance * (1 + std::abs(e[i]))) << "element " << i;
}

// A tensor of small integers stored as float, so sums of pieces are exact.
Tensor integer_valued(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  return randint(-8, 8, shape).to(kFloat32);
}

// This rank's piece of `whole` with sbp P: the pieces are different but add up to it.
Tensor partial_piece(const Tensor& whole, int64_t rank, int64_t world) {
  const Tensor offset = integer_valued(whole.shape(), 99);
  return rank == 0 ? whole - offset * static_cast<double>(world - 1) : offset;
}

TEST_F(GlobalTensor, RandnOnRanksEqualsRandnInOneProcess) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  for (const Shape& shape : {Shape{8, 3}, Shape{7, 5}, Shape{3, 2}}) {
    manual_seed(7);
    const Tensor reference = randn(shape);
    manual_seed(7);
    const Tensor global = randn(shape, TensorOptions().placement(placement).sbp(sbp::split(0)));
    EXPECT_TRUE(global.is_global());
    EXPECT_EQ(global.shape(), shape);
    EXPECT_EQ(global.sbp(), NdSbp{sbp::split(0)});
    const int64_t start = split_part_start(shape[0], world, rank), size = split_part_size(shape[0], world, rank);
    expect_equal(global.to_local(), reference.narrow(0, start, size));
    expect_equal(global, reference);  // tolist() gathers the logical tensor
    // The generator advanced the same way on every rank: the next draw agrees too.
    const Tensor next = randn({2});
    manual_seed(7);
    randn(shape);
    expect_equal(next, randn({2}));
  }
}

TEST_F(GlobalTensor, EveryOneDimensionalTransitionKeepsTheLogicalTensor) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const std::vector<Sbp> layouts{sbp::split(0), sbp::split(1), sbp::broadcast(), sbp::partial_sum()};
  const Tensor whole = integer_valued({5, 7}, 3);  // uneven on 2 and 4 ranks
  for (const Sbp& from : layouts) {
    const Tensor source = from.is_partial_sum() ? partial_piece(whole, rank, world).to_global(placement, from)
                                                : whole.to_global(placement, sbp::broadcast()).to_global(placement, from);
    ASSERT_EQ(source.shape(), whole.shape());
    for (const Sbp& to : layouts) {
      SCOPED_TRACE(from.str() + " -> " + to.str());
      const Tensor moved = source.to_global(placement, to);
      EXPECT_EQ(moved.sbp(), NdSbp{to});
      EXPECT_EQ(moved.to_local().shape(), local_shape(whole.shape(), placement, {to}, rank));
      expect_equal(moved, whole);
    }
  }
}

TEST_F(GlobalTensor, LinearOpsKeepPartialSumsAndOthersReduceFirst) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const Tensor whole = integer_valued({3, 4}, 17);
  const Tensor partial = partial_piece(whole, rank, world).to_global(placement, sbp::partial_sum());
  const Tensor linear_result = partial * 3.0 + partial - whole.to_global(placement, sbp::broadcast());
  EXPECT_EQ(linear_result.sbp(), NdSbp{sbp::partial_sum()});
  expect_equal(linear_result, whole * 3.0);
  // Not linear: the partial sum is reduced first, by the cheapest transition (reduce-scatter,
  // half an all-reduce's bytes).
  const Tensor relu_result = partial.relu();
  EXPECT_EQ(relu_result.sbp(), NdSbp{sbp::split(0)});
  expect_equal(relu_result, whole.relu());
}

TEST_F(GlobalTensor, PrintsTheLogicalTensorWithPlacementAndSbp) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const Tensor global = arange(6, TensorOptions().dtype(kFloat32).placement(placement).sbp(sbp::split(0)));
  std::ostringstream printed;
  printed << global;
  EXPECT_NE(printed.str().find("tensor([0., 1., 2., 3., 4., 5.], placement=oneflow.placement(type=\"cpu\", ranks=[0, 1"),
            std::string::npos)
      << printed.str();
  EXPECT_NE(printed.str().find("sbp=(S(0),), dtype=flow.float32)"), std::string::npos) << printed.str();
}

TEST_F(GlobalTensor, LocalPiecesOfUnevenSplitsMakeTheLogicalShape) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const Tensor piece = ones({split_part_size(9, world, rank), 2});
  const Tensor global = piece.to_global(placement, sbp::split(0));
  EXPECT_EQ(global.shape(), (Shape{9, 2}));
  EXPECT_EQ(global.sum().item<double>(), 18.0);
}

TEST_F(GlobalTensor, TwoDimensionalPlacementTransitions) {
  if (world != 4) GTEST_SKIP() << "needs 4 ranks";
  const Placement placement("cpu", std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  const Tensor whole = integer_valued({6, 5}, 11);
  const std::vector<NdSbp> layouts{{sbp::split(0), sbp::broadcast()}, {sbp::split(0), sbp::split(1)},
                                   {sbp::broadcast(), sbp::split(0)}, {sbp::split(0), sbp::split(0)},
                                   {sbp::broadcast(), sbp::broadcast()}, {sbp::split(1), sbp::split(0)}};
  for (const NdSbp& from : layouts) {
    const Tensor source = whole.to_global(placement, {sbp::broadcast(), sbp::broadcast()}).to_global(placement, from);
    for (const NdSbp& to : layouts) {
      SCOPED_TRACE(nd_sbp_str(from) + " -> " + nd_sbp_str(to));
      const Tensor moved = source.to_global(placement, to);
      EXPECT_EQ(moved.to_local().shape(), local_shape(whole.shape(), placement, to, rank));
      expect_equal(moved, whole);
    }
  }
  // A partial sum along the outer dimension, split along the inner one.
  NdSbp partial{sbp::partial_sum(), sbp::split(1)};
  const Tensor column_piece = whole.narrow(1, split_part_start(5, 2, rank % 2), split_part_size(5, 2, rank % 2));
  const Tensor partial_global = (rank < 2 ? column_piece : zeros_like(column_piece)).to_global(placement, partial);
  expect_equal(partial_global, whole);
}

TEST_F(GlobalTensor, DataParallelMatmulAndGradientsEqualOneProcess) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const Tensor x = integer_valued({8, 4}, 5), w = integer_valued({4, 3}, 6);
  // One process.
  Tensor w_ref = w.clone().requires_grad_();
  (x.matmul(w_ref).relu() * 2.0).sum().backward();
  // Data parallel: data split, weight broadcast.
  Tensor w_global = w.to_global(placement, sbp::broadcast()).requires_grad_();
  const Tensor x_global = x.to_global(placement, sbp::broadcast()).to_global(placement, sbp::split(0));
  const Tensor y = x_global.matmul(w_global);
  EXPECT_EQ(y.sbp(), NdSbp{sbp::split(0)});
  const Tensor loss = (y.relu() * 2.0).sum();
  loss.backward();
  expect_equal(loss, (x.matmul(w).relu() * 2.0).sum());
  ASSERT_TRUE(w_global.grad().defined());
  expect_equal(w_global.grad(), w_ref.grad());
}

TEST_F(GlobalTensor, ColumnAndRowParallelLinearEqualOneProcess) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const Tensor x = integer_valued({4, 6}, 21), w1 = integer_valued({8, 6}, 22), w2 = integer_valued({5, 8}, 23);
  Tensor w1_ref = w1.clone().requires_grad_(), w2_ref = w2.clone().requires_grad_(), x_ref = x.clone().requires_grad_();
  const Tensor out_ref = linear(linear(x_ref, w1_ref).relu(), w2_ref);
  (out_ref * out_ref).sum().backward();
  // Megatron: the first weight's rows split (column parallel), the second's columns (row parallel).
  const NdSbp b{sbp::broadcast()};
  Tensor w1_global = w1.to_global(placement, b).to_global(placement, sbp::split(0)).requires_grad_();
  Tensor w2_global = w2.to_global(placement, b).to_global(placement, sbp::split(1)).requires_grad_();
  Tensor x_global = x.to_global(placement, b).requires_grad_();
  const Tensor hidden = linear(x_global, w1_global).relu();
  EXPECT_EQ(hidden.sbp(), NdSbp{sbp::split(1)});
  const Tensor out = linear(hidden, w2_global);
  EXPECT_EQ(out.sbp(), NdSbp{sbp::partial_sum()});
  expect_equal(out, out_ref);
  (out * out).sum().backward();
  expect_equal(w1_global.grad(), w1_ref.grad());
  expect_equal(w2_global.grad(), w2_ref.grad());
  expect_equal(x_global.grad(), x_ref.grad());
  EXPECT_EQ(w1_global.grad().to_local().shape(), w1_global.to_local().shape());
}

// Tensor-parallel attention: query, key and value split over heads run the fused kernel on each
// rank's heads (its sbp keeps the split), forward and backward equal to one process; a mask that
// broadcasts over heads stays whole on every rank.
TEST_F(GlobalTensor, FusedAttentionSplitOverHeadsEqualsOneProcess) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  manual_seed(31);
  const Tensor q = randn({2, 4, 6, 8}), k = randn({2, 4, 9, 8}), v = randn({2, 4, 9, 5});
  const Tensor mask = randn({6, 9});
  Tensor q_ref = q.clone().requires_grad_(), k_ref = k.clone().requires_grad_(), v_ref = v.clone().requires_grad_();
  const Tensor out_ref = flash_attention(q_ref, k_ref, v_ref, mask);
  (out_ref * out_ref).sum().backward();
  const NdSbp b{sbp::broadcast()}, heads{sbp::split(1)};
  auto split_heads = [&](const Tensor& t) { return t.to_global(placement, b).to_global(placement, heads).requires_grad_(); };
  Tensor q_global = split_heads(q), k_global = split_heads(k), v_global = split_heads(v);
  const Tensor out = flash_attention(q_global, k_global, v_global, mask.to_global(placement, b));
  EXPECT_EQ(out.sbp(), heads);
  expect_equal(out, out_ref, 1e-5);
  (out * out).sum().backward();
  expect_equal(q_global.grad(), q_ref.grad(), 1e-5);
  expect_equal(k_global.grad(), k_ref.grad(), 1e-5);
  expect_equal(v_global.grad(), v_ref.grad(), 1e-5);
  EXPECT_EQ(q_global.grad().sbp(), heads);
}

// A tensor moves to another placement (a pipeline stage's ranks) and back, with gradients; ranks
// off a placement hold no piece but take part in the ops, as every rank runs the same program.
TEST_F(GlobalTensor, MovesBetweenPlacementsWithGradients) {
  const Placement everyone = Placement::all(DeviceType::kCPU);
  const Placement last("cpu", std::vector<int64_t>{world - 1});
  manual_seed(61);
  const Tensor whole = randn({5, 3});
  manual_seed(61);
  Tensor a = randn({5, 3}, TensorOptions().placement(everyone).sbp(sbp::split(0))).requires_grad_();
  const Tensor b = a.to_global(last, sbp::broadcast());
  EXPECT_EQ(b.placement(), last);
  EXPECT_EQ(b.shape(), (Shape{5, 3}));
  if (rank == world - 1) expect_equal(b.to_local(), whole);
  // On the last rank only; the others make the loss's seed too, without a piece.
  (b * b * 2.0).sum().backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().placement(), everyone);
  EXPECT_EQ(a.grad().sbp(), NdSbp{sbp::split(0)});
  expect_equal(a.grad(), whole * 4.0, 1e-6);
  // And back, onto another sbp.
  expect_equal(b.to_global(everyone, sbp::split(1)), whole);
  // Creation on a placement without this rank gives a global tensor with no piece here.
  const Tensor elsewhere = zeros({2, 2}, TensorOptions().placement(last).sbp(sbp::broadcast()));
  EXPECT_EQ(elsewhere.placement(), last);
  if (rank != world - 1) {
    EXPECT_EQ(elsewhere.to_local().numel(), 0);
  }
}

TEST_F(GlobalTensor, HybridOnTwoByTwoPlacementEqualsOneProcess) {
  if (world != 4) GTEST_SKIP() << "needs 4 ranks";
  const Placement placement("cpu", std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  const Tensor x = integer_valued({6, 4}, 31), w = integer_valued({5, 4}, 32);
  Tensor w_ref = w.clone().requires_grad_();
  linear(x, w_ref).sum().backward();
  // Data split over the outer dimension, weight rows over the inner one.
  const NdSbp bb{sbp::broadcast(), sbp::broadcast()};
  const Tensor x_global = x.to_global(placement, bb).to_global(placement, {sbp::split(0), sbp::broadcast()});
  Tensor w_global = w.to_global(placement, bb).to_global(placement, {sbp::broadcast(), sbp::split(0)}).requires_grad_();
  const Tensor y = linear(x_global, w_global);
  EXPECT_EQ(y.sbp(), (NdSbp{sbp::split(0), sbp::split(1)}));
  expect_equal(y, linear(x, w));
  y.sum().backward();
  expect_equal(w_global.grad(), w_ref.grad());
}

TEST_F(GlobalTensor, BatchNormOfEveryLayoutEqualsOneProcess) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  manual_seed(41);
  const Tensor x = randn({8, 4, 4, 4}), weight = randn({4}), bias = randn({4}), upstream = randn({8, 4, 4, 4});
  Tensor x_ref = x.clone().requires_grad_(), weight_ref = weight.clone().requires_grad_(), bias_ref = bias.clone().requires_grad_();
  const BatchNormTrainResult expected = batch_norm_train(x_ref, weight_ref, bias_ref, 1e-5);
  (expected.out * upstream).sum().backward();
  const NdSbp broadcast{sbp::broadcast()};
  // Split over the batch or a spatial dim: statistics synced over the ranks (SyncBatchNorm).
  // Split over channels: each rank normalises its channels. Broadcast: the primitive on every
  // rank, whose unused outputs (mean, invstd) get global zero gradients.
  for (const Sbp& layout : {sbp::split(0), sbp::split(2), sbp::split(1), sbp::broadcast()}) {
    SCOPED_TRACE(layout.str());
    Tensor x_global = x.to_global(placement, broadcast).to_global(placement, layout).requires_grad_();
    Tensor weight_global = weight.to_global(placement, broadcast).requires_grad_();
    Tensor bias_global = bias.to_global(placement, broadcast).requires_grad_();
    const BatchNormTrainResult result = batch_norm_train(x_global, weight_global, bias_global, 1e-5);
    (result.out * upstream.to_global(placement, broadcast)).sum().backward();
    expect_equal(result.out, expected.out, 1e-5);
    expect_equal(result.mean, expected.mean, 1e-5);
    expect_equal(result.invstd, expected.invstd, 1e-5);
    expect_equal(x_global.grad(), x_ref.grad(), 1e-4);
    expect_equal(weight_global.grad(), weight_ref.grad(), 1e-4);
    expect_equal(bias_global.grad(), bias_ref.grad(), 1e-4);
  }
}

// ZeRO's buckets: one collective for many tensors of uneven rows.
TEST_F(GlobalTensor, BucketedRowCollectivesEqualTheirOnePerTensorTwins) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const std::vector<Shape> shapes{{5, 3}, {7}, {4, 2, 2}, {9, 1}};
  TensorList wholes, splits, partials;
  for (size_t i = 0; i < shapes.size(); ++i) {
    wholes.push_back(integer_valued(shapes[i], 40 + i));
    splits.push_back(from_whole(wholes[i], placement, NdSbp{sbp::split(0)}));
    partials.push_back(make_global({shapes[i], kFloat32, kCPU}, placement, NdSbp{Sbp::partial_sum()}, partial_piece(wholes[i], rank, world)));
  }
  const TensorList gathered = all_gather_row_splits(splits);
  const TensorList scattered = reduce_scatter_partial_sums(partials);
  ASSERT_EQ(gathered.size(), shapes.size());
  ASSERT_EQ(scattered.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(gathered[i].sbp(), NdSbp{Sbp::broadcast()});
    expect_equal(gathered[i].to_local(), wholes[i]);
    EXPECT_EQ(scattered[i].sbp(), NdSbp{sbp::split(0)});
    expect_equal(scattered[i].to_local(), splits[i].to_local());
  }
  EXPECT_THROW_MSG(all_gather_row_splits({splits[0], partials[1]}), "[all_gather] bucketed tensors must have sbp (S(0),)");
  Ranks reversed = placement.ranks();
  std::reverse(reversed.begin(), reversed.end());
  const Tensor misordered = make_global({shapes[0], kFloat32, kCPU}, Placement(DeviceType::kCPU, reversed), NdSbp{Sbp::partial_sum()},
                                        partials[0].to_local());
  EXPECT_THROW_MSG(reduce_scatter_partial_sums({misordered}), "[reduce_scatter] bucketing needs the ranks of");
}

TEST_F(GlobalTensor, MistakesAreClearErrors) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  const Tensor x = ones({4, 2});
  EXPECT_THROW(x.to_global(placement, sbp::split(2)), Error);
  EXPECT_THROW(x.to_global(placement, NdSbp{sbp::split(0), sbp::broadcast()}), Error);
  EXPECT_THROW(x.to_global(Placement("cpu", std::vector<int64_t>{0, world + 3}), sbp::broadcast()), Error);
  EXPECT_THROW(Placement("cpu", std::vector<int64_t>{0, 0}), Error);
  EXPECT_THROW(Placement("tpu", std::vector<int64_t>{0}), Error);
  const Tensor global = x.to_global(placement, sbp::broadcast());
  try {
    (void)(global + x);
    FAIL() << "mixing local and global tensors must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(global.data_ptr(), Error);
  EXPECT_THROW(x.placement(), Error);
  // Pieces that are not a balanced split of any tensor.
  EXPECT_THROW(ones({rank == 0 ? 5 : 1, 2}).to_global(placement, sbp::split(0)), Error);
  // Point to point with a peer outside the world, or with this rank: errors at the call.
  for (const int64_t peer : {world, rank, int64_t{-1}}) {
    try {
      send(x, peer);
      FAIL() << "send to " << peer << " must fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[send] peer rank " + std::to_string(peer) + " must be another rank"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(recv({2}, kFloat32, kCPU, peer), Error);
  }
}

}  // namespace
}  // namespace flow::distributed::testing

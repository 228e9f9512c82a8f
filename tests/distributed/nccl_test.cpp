// The NCCL process group on CUDA tensors, against references each rank computes on the CPU. NCCL
// takes one GPU per rank, so a test skips unless every rank of the job has a device of its own
// (cuda:LOCAL_RANK); with one GPU only the 1-rank job runs.
#include <numeric>

#include "core/flow.h"
#include "distributed/rank_fixture.h"

namespace flow::distributed::testing {
namespace {

class Nccl : public RankTest {
 protected:
  void SetUp() override {
    RankTest::SetUp();
    if (IsSkipped()) return;
    if (!cuda_is_available() || cuda_device_count() < world) {
      GTEST_SKIP() << "needs one CUDA device per rank (" << world << ")";
    }
    device = Device("cuda:" + std::to_string(rank));
  }
  // Tensors made on the CPU and moved, so that the contents are exactly what the reference uses.
  Tensor on_device(const Tensor& cpu) const { return cpu.to(device); }

  Device device = kCPU;
};

Tensor rank_values(int64_t rank, int64_t count, DType dtype) {
  return (arange(0, count, 1, TensorOptions(kFloat64)) * -0.25 + static_cast<double>(rank) * 1.5).to(dtype);
}

TEST_F(Nccl, AllReduceEveryReduction) {
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    for (ReduceOp reduce : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      Tensor expected = rank_values(0, 37, dtype);
      for (int64_t r = 1; r < world; ++r) {
        Tensor other = rank_values(r, 37, dtype);
        expected = reduce == ReduceOp::kSum ? expected + other
                   : reduce == ReduceOp::kMax ? maximum(expected, other)
                                              : minimum(expected, other);
      }
      Tensor tensor = on_device(rank_values(rank, 37, dtype));
      group().all_reduce(tensor, reduce, {})->wait();
      EXPECT_EQ(tensor.device(), device);
      EXPECT_TRUE(allclose(tensor.cpu(), expected, 0, 0)) << dtype_name(dtype) << " " << reduce_op_name(reduce);
    }
  }
}

TEST_F(Nccl, AllGatherAndReduceScatterWithUnevenPieces) {
  // Member r holds r + 1 rows of 3 elements.
  std::vector<int64_t> sizes(world);
  std::iota(sizes.begin(), sizes.end(), 1);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  std::vector<Tensor> pieces;
  for (int64_t r = 0; r < world; ++r) pieces.push_back(rank_values(r, sizes[r] * 3, kFloat32).view({sizes[r], 3}));
  Tensor output = on_device(zeros({total, 3}));
  group().all_gather(on_device(pieces[rank]), output, sizes, {})->wait();
  EXPECT_TRUE(allclose(output.cpu(), cat(pieces, 0), 0, 0));

  // Each member contributes a whole (total, 3) tensor and keeps the sum of its own rows.
  Tensor whole_sum = zeros({total, 3});
  for (int64_t r = 0; r < world; ++r) whole_sum = whole_sum + rank_values(r, total * 3, kFloat32).view({total, 3});
  Tensor mine = on_device(zeros({sizes[rank], 3}));
  group().reduce_scatter(on_device(rank_values(rank, total * 3, kFloat32).view({total, 3})), mine, sizes, ReduceOp::kSum, {})->wait();
  const int64_t first = std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0});
  EXPECT_TRUE(allclose(mine.cpu(), whole_sum.slice(0, first, first + sizes[rank]), 1e-6, 1e-6));
}

TEST_F(Nccl, BroadcastFromEveryRoot) {
  for (int64_t root = 0; root < world; ++root) {
    Tensor tensor = on_device(rank_values(rank, 11, kFloat64));
    group().broadcast(tensor, root, {})->wait();
    EXPECT_TRUE(allclose(tensor.cpu(), rank_values(root, 11, kFloat64), 0, 0)) << "root " << root;
  }
}

TEST_F(Nccl, AllToAllAndSendRecv) {
  // Every member sends 2 rows of 4 to every member: row values say who sent them.
  const std::vector<int64_t> sizes(world, 2);
  Tensor output = on_device(zeros({2 * world, 4}));
  group().all_to_all(on_device(full({2 * world, 4}, static_cast<double>(rank))), sizes, output, sizes, {})->wait();
  std::vector<Tensor> expected;
  for (int64_t r = 0; r < world; ++r) expected.push_back(full({2, 4}, static_cast<double>(r)));
  EXPECT_TRUE(allclose(output.cpu(), cat(expected, 0), 0, 0));
  if (world < 2) return;
  if (rank == 0) group().send(on_device(rank_values(7, 9, kFloat32)), 1)->wait();
  if (rank == 1) {
    Tensor received = on_device(zeros({9}));
    group().recv(received, 0)->wait();
    EXPECT_TRUE(allclose(received.cpu(), rank_values(7, 9, kFloat32), 0, 0));
  }
}

}  // namespace
}  // namespace flow::distributed::testing

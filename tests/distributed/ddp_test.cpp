// DistributedDataParallel over the real process group, as every rank of a flow_run job:
//   flow_run --nproc-per-node 2 --timeout 50 -- flow_ddp_tests --gtest_filter='DdpRanks.*'
// Each rank also trains the one-process reference on the full batch, which it can rebuild from
// the seeds, and compares. Without flow_run's environment the suites skip themselves.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/ddp_reference.h"
#include "common/test_util.h"
#include "distributed/distributed.h"
#include "nn/parallel/ddp.h"

namespace {

using flow::nn::parallel::DistributedDataParallel;
using flow::nn::parallel::DistributedDataParallelOptions;
namespace dist = flow::distributed;

constexpr int kSteps = 20;
constexpr double kLr = 0.1;

class DdpRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("RANK") == nullptr) GTEST_SKIP() << "runs as the ranks of a flow_run job";
    dist::init_process_group(dist::InitOptions().set_timeout(timeout()));
    rank = dist::get_rank();
    world = dist::get_world_size();
  }
  void TearDown() override {
    if (dist::is_initialized()) dist::destroy_process_group();
  }
  virtual std::chrono::milliseconds timeout() const { return std::chrono::seconds(20); }

  std::shared_ptr<flow::nn::Module> train_reference(const std::vector<flow::testing::DdpBatch>& batches) const {
    auto model = flow::testing::make_ddp_mlp(0);
    for (const auto& batch : batches) {
      flow::testing::ddp_loss(*model, batch).backward();
      flow::testing::sgd_step(*model, kLr);
    }
    return model;
  }

  // This rank's replica, started from its own seed so that only the broadcast makes them equal.
  std::shared_ptr<flow::nn::Module> train_ddp(const std::vector<flow::testing::DdpBatch>& batches,
                                              const DistributedDataParallelOptions& options) const {
    auto model = flow::testing::make_ddp_mlp(static_cast<uint64_t>(rank));
    DistributedDataParallel ddp(model, options);
    for (const auto& batch : batches) {
      flow::testing::ddp_loss(ddp, batch.shard(rank, world)).backward();
      flow::testing::sgd_step(ddp, kLr);
    }
    return model;
  }

  int64_t rank = 0;
  int64_t world = 1;
};

TEST_F(DdpRanks, HalfBatchesMatchOneProcessOnTheFullBatch) {
  const auto batches = flow::testing::make_ddp_batches(kSteps, 32 * world, 7);
  const auto reference = train_reference(batches);
  const auto model = train_ddp(batches, DistributedDataParallelOptions());
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), flow::testing::kSplitBatchTolerance);
}

TEST_F(DdpRanks, SeveralBucketsGiveTheSameResult) {
  const auto batches = flow::testing::make_ddp_batches(kSteps, 32 * world, 8);
  const auto reference = train_reference(batches);
  const auto options = DistributedDataParallelOptions().bucket_cap_mb(0.001);
  EXPECT_EQ(DistributedDataParallel(flow::testing::make_ddp_mlp(0), options).bucket_indices().size(), 4u);
  const auto model = train_ddp(batches, options);
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), flow::testing::kSplitBatchTolerance);
}

TEST_F(DdpRanks, NoSyncAccumulatesThenAveragesEverything) {
  const auto micro = flow::testing::make_ddp_batches(2 * kSteps, 16 * world, 9);
  auto reference = flow::testing::make_ddp_mlp(0);
  auto model = flow::testing::make_ddp_mlp(static_cast<uint64_t>(rank));
  DistributedDataParallel ddp(model);
  for (int step = 0; step < kSteps; ++step) {
    flow::testing::ddp_loss(*reference, micro[2 * step]).backward();
    flow::testing::ddp_loss(*reference, micro[2 * step + 1]).backward();
    flow::testing::sgd_step(*reference, kLr);
    {
      auto no_sync = ddp.no_sync();
      flow::testing::ddp_loss(ddp, micro[2 * step].shard(rank, world)).backward();
    }
    flow::testing::ddp_loss(ddp, micro[2 * step + 1].shard(rank, world)).backward();
    flow::testing::sgd_step(ddp, kLr);
  }
  // The sums are associated differently ((a0 + b0) + (a1 + b1) against (a0 + a1) + (b0 + b1)), so
  // float32 rounding may differ by a few ulps per step.
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), 1e-5);
}

TEST_F(DdpRanks, CheckpointSavedOnceLoadsOnEveryRank) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("flow_ddp_checkpoint_" + std::string(std::getenv("MASTER_PORT")) + ".safetensors")).string();
  auto model = flow::testing::make_ddp_mlp(static_cast<uint64_t>(rank));
  DistributedDataParallel ddp(model);
  flow::nn::parallel::save_on_rank0(ddp.state_dict(), path);
  auto restored = flow::testing::make_ddp_mlp(100 + static_cast<uint64_t>(rank));
  restored->load_state_dict(flow::load(path));
  EXPECT_EQ(flow::testing::max_relative_difference(*restored, *model), 0);
  dist::barrier();
  if (rank == 0) std::filesystem::remove(path);
}

// Rank 1 dies mid-training; rank 0's next backward must fail with a flow::Error within the
// group's timeout. flow_run would stop rank 0 with SIGTERM as soon as rank 1 dies, so rank 0
// ignores it here to show that it fails by itself; flow_run then exits 1 for rank 1.
class DdpFaults : public DdpRanks {
 protected:
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(3); }
};

TEST_F(DdpFaults, KilledRankMakesTheOthersRaise) {
  ASSERT_EQ(world, 2);
  if (rank == 0) std::signal(SIGTERM, SIG_IGN);
  const auto batches = flow::testing::make_ddp_batches(kSteps, 64, 10);
  auto model = flow::testing::make_ddp_mlp(0);
  DistributedDataParallel ddp(model);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int step = 0; step < kSteps; ++step) {
      if (rank == 1 && step == 5) std::raise(SIGKILL);
      flow::testing::ddp_loss(ddp, batches[static_cast<size_t>(step)].shard(rank, world)).backward();
      flow::testing::sgd_step(ddp, kLr);
    }
    ADD_FAILURE() << "training went on without rank 1";
  } catch (const flow::Error& e) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %lld raised after %.2f s: %s\n", static_cast<long long>(rank), seconds, e.what());
    EXPECT_LT(seconds, 3.0 + 5.0);
  }
  dist::set_process_group(nullptr);  // the group's peer is gone; nothing is left to finish
}

}  // namespace

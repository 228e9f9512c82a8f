// DistributedDataParallel with ranks as threads of this process (tests/common/thread_process_group.h),
// so bucketing, no_sync and unused-parameter handling are tested without Gloo. The multi-process
// tests over the real process group are in tests/distributed/ddp_test.cpp.
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <thread>

#include "common/ddp_reference.h"
#include "common/test_util.h"
#include "common/thread_process_group.h"
#include "core/thread_pool.h"
#include "nn/parallel/ddp.h"

using flow::Tensor;
using flow::nn::parallel::DistributedDataParallel;
using flow::nn::parallel::DistributedDataParallelOptions;
using flow::testing::ThreadProcessGroup;

namespace {
constexpr int kSteps = 20;
constexpr double kLr = 0.1;

// Runs body(rank, group) on world_size threads; rethrows the first failure.
void run_ranks(int64_t world_size, const std::function<void(int64_t, std::shared_ptr<ThreadProcessGroup>)>& body) {
  auto groups = ThreadProcessGroup::create(world_size);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        flow::set_thread_local_num_threads(1);
        body(rank, groups[static_cast<size_t>(rank)]);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

std::shared_ptr<flow::nn::Module> train_reference(const std::vector<flow::testing::DdpBatch>& batches) {
  flow::set_thread_local_num_threads(1);
  auto model = flow::testing::make_ddp_mlp(0);
  for (const auto& batch : batches) {
    flow::testing::ddp_loss(*model, batch).backward();
    flow::testing::sgd_step(*model, kLr);
  }
  return model;
}

// Two ranks, each on half of every batch, starting from different weights (rank 0's win).
std::vector<std::shared_ptr<flow::nn::Module>> train_ddp(const std::vector<flow::testing::DdpBatch>& batches, double bucket_cap_mb,
                                                        size_t* num_buckets = nullptr) {
  std::vector<std::shared_ptr<flow::nn::Module>> models{flow::testing::make_ddp_mlp(0), flow::testing::make_ddp_mlp(1)};
  run_ranks(2, [&](int64_t rank, std::shared_ptr<ThreadProcessGroup> group) {
    DistributedDataParallel ddp(models[static_cast<size_t>(rank)],
                                DistributedDataParallelOptions().process_group(group).bucket_cap_mb(bucket_cap_mb));
    if (num_buckets != nullptr && rank == 0) *num_buckets = ddp.bucket_indices().size();
    for (const auto& batch : batches) {
      flow::testing::ddp_loss(ddp, batch.shard(rank, 2)).backward();
      flow::testing::sgd_step(ddp, kLr);
    }
  });
  return models;
}
}  // namespace

TEST(DistributedDataParallelThreads, TwoRanksOfHalfBatchesMatchOneProcess) {
  const auto batches = flow::testing::make_ddp_batches(kSteps, 64, 7);
  const auto reference = train_reference(batches);
  size_t num_buckets = 0;
  const auto models = train_ddp(batches, 25, &num_buckets);
  EXPECT_EQ(num_buckets, 1u);
  EXPECT_LT(flow::testing::max_relative_difference(*models[0], *reference), flow::testing::kSplitBatchTolerance);
  EXPECT_LT(flow::testing::max_relative_difference(*models[1], *reference), flow::testing::kSplitBatchTolerance);
}

TEST(DistributedDataParallelThreads, SeveralBucketsGiveTheSameResult) {
  const auto batches = flow::testing::make_ddp_batches(kSteps, 64, 7);
  const auto reference = train_reference(batches);
  size_t num_buckets = 0;
  const auto models = train_ddp(batches, 0.001, &num_buckets);  // 1 KiB: [b3 w3 b2] [w2] [b1] [w1]
  EXPECT_EQ(num_buckets, 4u);
  EXPECT_LT(flow::testing::max_relative_difference(*models[0], *reference), flow::testing::kSplitBatchTolerance);
  EXPECT_LT(flow::testing::max_relative_difference(*models[1], *reference), flow::testing::kSplitBatchTolerance);
}

TEST(DistributedDataParallelThreads, BucketsFollowReverseRegistrationOrder) {
  auto group = ThreadProcessGroup::create(1)[0];
  DistributedDataParallel ddp(flow::testing::make_ddp_mlp(0), DistributedDataParallelOptions().process_group(group).bucket_cap_mb(0.002));
  std::vector<size_t> order;
  for (const auto& bucket : ddp.bucket_indices()) order.insert(order.end(), bucket.begin(), bucket.end());
  EXPECT_EQ(order, (std::vector<size_t>{5, 4, 3, 2, 1, 0}));
}

TEST(DistributedDataParallelThreads, NoSyncAccumulatesLocallyThenAveragesEverything) {
  const auto micro = flow::testing::make_ddp_batches(2 * kSteps, 32, 11);
  flow::set_thread_local_num_threads(1);
  auto reference = flow::testing::make_ddp_mlp(0);
  for (int step = 0; step < kSteps; ++step) {
    flow::testing::ddp_loss(*reference, micro[2 * step]).backward();
    flow::testing::ddp_loss(*reference, micro[2 * step + 1]).backward();
    flow::testing::sgd_step(*reference, kLr);
  }
  std::vector<std::shared_ptr<flow::nn::Module>> models{flow::testing::make_ddp_mlp(0), flow::testing::make_ddp_mlp(0)};
  std::vector<int64_t> collectives_in_no_sync(2, 0);
  run_ranks(2, [&](int64_t rank, std::shared_ptr<ThreadProcessGroup> group) {
    DistributedDataParallel ddp(models[static_cast<size_t>(rank)], DistributedDataParallelOptions().process_group(group));
    for (int step = 0; step < kSteps; ++step) {
      {
        auto no_sync = ddp.no_sync();
        const int64_t before = group->collectives();
        flow::testing::ddp_loss(ddp, micro[2 * step].shard(rank, 2)).backward();
        collectives_in_no_sync[static_cast<size_t>(rank)] += group->collectives() - before;
      }
      flow::testing::ddp_loss(ddp, micro[2 * step + 1].shard(rank, 2)).backward();
      flow::testing::sgd_step(ddp, kLr);
    }
  });
  EXPECT_EQ(collectives_in_no_sync, (std::vector<int64_t>{0, 0}));
  // The sums are associated differently ((a0 + b0) + (a1 + b1) against (a0 + a1) + (b0 + b1)), so
  // float32 rounding may differ by a few ulps per step.
  EXPECT_LT(flow::testing::max_relative_difference(*models[0], *reference), 1e-5);
  EXPECT_LT(flow::testing::max_relative_difference(*models[1], *reference), 1e-5);
}

namespace {
// Uses only its first branch; the second's parameters never get a gradient.
struct TwoBranches : flow::nn::Module {
  TwoBranches() {
    used = register_module("used", std::make_shared<flow::nn::Linear>(4, 2));
    unused = register_module("unused", std::make_shared<flow::nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override { return used->forward(x); }
  std::shared_ptr<flow::nn::Linear> used, unused;
};
}  // namespace

TEST(DistributedDataParallelThreads, UnusedParametersNeedFindUnusedParameters) {
  auto group = ThreadProcessGroup::create(1)[0];
  const Tensor x = flow::ones({3, 4});
  DistributedDataParallel strict(std::make_shared<TwoBranches>(), DistributedDataParallelOptions().process_group(group));
  strict(x).sum().backward();
  EXPECT_THROW_MSG(strict(x), "expected to have finished reduction in the prior iteration");

  auto model = std::make_shared<TwoBranches>();
  DistributedDataParallel lenient(model, DistributedDataParallelOptions().process_group(group).find_unused_parameters(true));
  for (int i = 0; i < 2; ++i) lenient(x).sum().backward();
  EXPECT_EQ(model->used->parameters()[1].grad().tolist<float>(), (std::vector<float>{6, 6}));
  EXPECT_EQ(model->unused->parameters()[1].grad().tolist<float>(), (std::vector<float>{0, 0}));
}

TEST(DistributedDataParallelThreads, StateDictIsTheWrappedModules) {
  auto group = ThreadProcessGroup::create(1)[0];
  auto model = flow::testing::make_ddp_mlp(0);
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().process_group(group));
  EXPECT_EQ(ddp.state_dict().keys(), model->state_dict().keys());
  ASSERT_EQ(ddp.parameters().size(), model->parameters().size());
  for (size_t i = 0; i < model->parameters().size(); ++i) EXPECT_TRUE(ddp.parameters()[i].same(model->parameters()[i]));
  ddp.eval();
  EXPECT_FALSE(model->is_training());
  EXPECT_THROW_MSG(DistributedDataParallel(model, DistributedDataParallelOptions().process_group(group).bucket_cap_mb(0)),
                   "[DistributedDataParallel] bucket_cap_mb must be positive");
  EXPECT_THROW_MSG(DistributedDataParallel(model, DistributedDataParallelOptions().process_group(group).ranks({1})),
                   "ranks do not include this process's rank 0");
}

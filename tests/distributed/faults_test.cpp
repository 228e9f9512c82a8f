// Failures a job must survive as a flow::Error on every rank, never a hang or a crash. Each test
// runs as its own job (see tests/CMakeLists.txt), since some leave the group unusable.
#include <unistd.h>

#include "common/test_util.h"
#include "distributed/rank_fixture.h"

namespace flow::distributed::testing {
namespace {

using std::chrono::milliseconds;

class Faults : public RankTest {
 protected:
  milliseconds timeout() const override { return std::chrono::seconds(3); }
};

TEST_F(Faults, DtypeAndCountMismatchNameThePeerAndLeaveTheGroupUsable) {
  Tensor odd = rank == 1 ? make_filled<double>({6}, std::vector<double>(6, 1)) : make_filled<float>({6}, std::vector<float>(6, 1));
  std::string expected = rank == 1 ? "[all_reduce] rank 1: peer rank 0 sends float32 with 6 elements, this rank has float64 with 6 elements"
                                   : "[all_reduce] rank " + std::to_string(rank) + ": peer rank 1 sends float64 with 6 elements, this rank has float32 with 6 elements";
  EXPECT_THROW_MSG(group().all_reduce(odd, ReduceOp::kSum, {})->wait(), expected);

  Tensor counted = make_filled<float>({rank == 0 ? 4 : 5}, std::vector<float>(rank == 0 ? 4 : 5, 1));
  EXPECT_THROW_MSG(group().broadcast(counted, 0, {})->wait(), "[broadcast] rank " + std::to_string(rank) + ": peer rank");

  // The disagreement was found before any data moved: the group still works.
  Tensor ones = make_filled<float>({3}, std::vector<float>(3, 1));
  group().all_reduce(ones, ReduceOp::kSum, {})->wait();
  EXPECT_EQ(contents<float>(ones), std::vector<float>(3, static_cast<float>(world)));
}

TEST_F(Faults, SendReceiveMismatchFailsBothSides) {
  if (rank > 1) return;
  Tensor buffer = make_filled<int32_t>({rank == 0 ? 2 : 3}, std::vector<int32_t>(rank == 0 ? 2 : 3, 7));
  if (rank == 0) {
    EXPECT_THROW_MSG(group().send(buffer, 1)->wait(), "[send] rank 0: peer rank 1 sends int32 with 3 elements, this rank has int32 with 2");
  } else {
    EXPECT_THROW_MSG(group().recv(buffer, 0)->wait(), "[recv] rank 1: peer rank 0 sends int32 with 2 elements, this rank has int32 with 3");
  }
}

TEST_F(Faults, RankThatExitsMidRunFailsTheOthers) {
  Tensor tensor = make_filled<float>({1024}, std::vector<float>(1024, 1));
  group().all_reduce(tensor, ReduceOp::kSum, {})->wait();
  if (rank == world - 1) _exit(0);  // dies without a word to its peers
  bool failed = false;
  for (int attempt = 0; attempt < 5 && !failed; ++attempt) {
    try {
      group().all_reduce(tensor, ReduceOp::kSum, {})->wait();
    } catch (const Error& e) {
      failed = true;
      std::string message = e.what();
      EXPECT_NE(message.find("[all_reduce] rank " + std::to_string(rank) + ": "), std::string::npos) << message;
    }
  }
  EXPECT_TRUE(failed) << "all_reduce kept succeeding with a rank gone";
  EXPECT_THROW_MSG(group().all_reduce(tensor, ReduceOp::kSum, {})->wait(), "the process group is unusable after an earlier failure");
}

// Rank 0 also serves the store, which dies with it: the survivors still name it (from the
// addresses every rank read at init).
TEST_F(Faults, RankZeroThatExitsMidRunIsNamedByTheOthers) {
  Tensor tensor = make_filled<float>({1024}, std::vector<float>(1024, 1));
  group().all_reduce(tensor, ReduceOp::kSum, {})->wait();
  if (rank == 0) _exit(0);
  std::string message;
  for (int attempt = 0; attempt < 5 && message.empty(); ++attempt) {
    try {
      group().all_reduce(tensor, ReduceOp::kSum, {})->wait();
    } catch (const Error& e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(message.empty()) << "all_reduce kept succeeding with rank 0 gone";
  // With two ranks rank 0 is the only peer, so no other rank's failure can be reported first.
  EXPECT_NE(message.find("[all_reduce] rank 1: peer rank 0 closed the connection"), std::string::npos) << message;
}

// Overrides the launcher's environment for one rank, so init runs in the test body.
class FaultsAtInit : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!flow::testing::in_rank_process()) GTEST_SKIP() << "runs as ranks of a job: flow_distributed_tests --ranks=N";
    rank = std::stoll(std::getenv("RANK"));
    world = std::stoll(std::getenv("WORLD_SIZE"));
  }
  void TearDown() override { destroy_process_group(); }
  int64_t rank = 0;
  int64_t world = 1;
};

TEST_F(FaultsAtInit, WorldSizeDisagreementFailsEveryRank) {
  InitOptions options = InitOptions().set_timeout(milliseconds(5000));
  if (rank == 1) options.set_world_size(world + 1);
  EXPECT_THROW_MSG(init_process_group(options), "has WORLD_SIZE=" + std::to_string(world) + " (every rank must be launched with the same WORLD_SIZE)");
  EXPECT_FALSE(is_initialized());
}

}  // namespace
}  // namespace flow::distributed::testing

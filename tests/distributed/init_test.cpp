// init_process_group's checks of its settings, and a world of one rank (single process).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "common/test_util.h"
#include "distributed/rank_fixture.h"
#include "distributed/store_client.h"
#include "distributed/store_server.h"

namespace flow::distributed::testing {
namespace {

using std::chrono::milliseconds;

// Clears the launcher's variables for the test and restores them after.
class InitProcessGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  void TearDown() override {
    destroy_process_group();
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name, value->c_str(), 1);
    }
  }
  static void set_environment(int64_t rank, int64_t world_size, int port) {
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  }

  static constexpr const char* kVariables[] = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                               "LOCAL_WORLD_SIZE", "FLOW_DIST_TIMEOUT_S", "FLOW_RDZV_ID"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(InitProcessGroup, MissingEnvironment) {
  EXPECT_THROW_MSG(init_process_group(), "[init_process_group] environment variable WORLD_SIZE is not set");
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "0", 1);
  EXPECT_THROW_MSG(init_process_group(), "MASTER_ADDR is not set");
  EXPECT_FALSE(is_initialized());
}

TEST_F(InitProcessGroup, InvalidSettings) {
  set_environment(0, 2, flow::testing::free_port());
  setenv("RANK", "one", 1);
  EXPECT_THROW_MSG(init_process_group(), "RANK='one' is not an integer");
  set_environment(2, 2, flow::testing::free_port());
  EXPECT_THROW_MSG(init_process_group(), "RANK=2 is outside 0..WORLD_SIZE-1 (WORLD_SIZE=2)");
  set_environment(0, 2, 70000);
  EXPECT_THROW_MSG(init_process_group(), "MASTER_PORT=70000 is not a TCP port");
  set_environment(0, 1, flow::testing::free_port());
  setenv("FLOW_DIST_TIMEOUT_S", "soon", 1);
  EXPECT_THROW_MSG(init_process_group(), "FLOW_DIST_TIMEOUT_S='soon' is not a number of seconds");
  EXPECT_THROW_MSG(init_process_group(InitOptions().set_backend("mpi")), "unknown backend \"mpi\"");
}

TEST_F(InitProcessGroup, RankZeroUnreachable) {
  set_environment(1, 2, flow::testing::free_port());  // nobody serves that port
  EXPECT_THROW_MSG(init_process_group(InitOptions().set_timeout(milliseconds(500))),
                   "rank 1: rank 0's rendezvous store at 127.0.0.1:");
}

TEST_F(InitProcessGroup, PortInUse) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  set_environment(0, 1, ntohs(address.sin_port));
  EXPECT_THROW_MSG(init_process_group(InitOptions().set_timeout(milliseconds(2000))), "the port is in use");
  close(listener);
}

// A rank whose MASTER_PORT leads to another job's store (two jobs on one port) fails at once,
// naming both rendezvous ids, instead of joining that job.
TEST_F(InitProcessGroup, StoreOfAnotherJobIsRefused) {
  const int port = flow::testing::free_port();
  StoreServer other_job(port, "job-a");
  set_environment(1, 2, port);
  setenv("FLOW_RDZV_ID", "job-b", 1);
  EXPECT_THROW_MSG(init_process_group(InitOptions().set_timeout(milliseconds(5000))),
                   "[init_process_group] rank 1: the rendezvous store at 127.0.0.1:" + std::to_string(port) +
                       " belongs to another job: it serves rendezvous id 'job-a', this rank has rendezvous id 'job-b'");
  EXPECT_FALSE(is_initialized());
}

// The store answers only its own job: a stranger's calls, its abort included, change nothing.
TEST(StoreRdzvId, StoreServesOnlyItsOwnJob) {
  const int port = flow::testing::free_port();
  StoreServer server(port, "job-a");
  StoreClient ours("127.0.0.1", port, milliseconds(2000), milliseconds(5000), "job-a");
  const auto expect_refused = [&](const std::string& rdzv_id, const std::string& described) {
    StoreClient stranger("127.0.0.1", port, milliseconds(2000), milliseconds(5000), rdzv_id);
    try {
      stranger.add("init/rank/1", 1);
      ADD_FAILURE() << "a client with " << described << " was served";
    } catch (const RdzvIdMismatch& e) {
      EXPECT_NE(std::string(e.what()).find("it serves rendezvous id 'job-a', this rank has " + described),
                std::string::npos)
          << e.what();
    }
    stranger.abort("rank 1: another process also has RANK=1");
  };
  expect_refused("job-b", "rendezvous id 'job-b'");
  expect_refused("", "no rendezvous id");
  // Not aborted, and the strangers' adds did not count.
  ours.set_string("key", "value");
  EXPECT_EQ(ours.get_string("key", milliseconds(1000)), "value");
  EXPECT_EQ(ours.add("init/rank/1", 1), 1);
}

TEST_F(InitProcessGroup, WorldOfOneRank) {
  init_process_group(InitOptions().set_rank(0).set_world_size(1).set_master_addr("127.0.0.1")
                         .set_master_port(flow::testing::free_port()).set_timeout(milliseconds(5000)));
  EXPECT_TRUE(is_initialized());
  EXPECT_THROW_MSG(init_process_group(), "already installed");
  ProcessGroup& group = process_group("test");
  Tensor tensor = make_filled<float>({3}, {1, 2, 3});
  group.all_reduce(tensor, ReduceOp::kAvg, {})->wait();
  EXPECT_EQ(contents<float>(tensor), (std::vector<float>{1, 2, 3}));
  Tensor gathered = make_tensor({3}, kFloat32, kCPU);
  group.all_gather(tensor, gathered, {3}, {})->wait();
  EXPECT_EQ(contents<float>(gathered), (std::vector<float>{1, 2, 3}));
  group.broadcast(tensor, 0, {0})->wait();
  barrier();
  EXPECT_THROW_MSG(group.broadcast(tensor, 1, {}), "[broadcast] the root rank 1 is not one of the members");
  EXPECT_THROW_MSG(group.send(tensor, 0), "[send] peer rank 0 must be another rank");
  destroy_process_group();
  EXPECT_FALSE(is_initialized());
  EXPECT_EQ(get_world_size(), 1);
}

}  // namespace
}  // namespace flow::distributed::testing

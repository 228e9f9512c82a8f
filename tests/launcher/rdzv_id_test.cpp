// Jobs and their rendezvous ids (--rdzv-id, FLOW_RDZV_ID): rank 0's store serves only the ranks of
// its own job, so a rank of another job started on the same --master-port fails with a clear
// error instead of joining or aborting the job, while nodes given one id form one job. The ranks
// are flow_rank --job: a real process group, whose ranks do one more rendezvous through the store
// (a sub-group) only once the test lets them, after the stranger has come and gone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "common/command_line.h"
#include "common/multiprocess.h"
#include "launcher/launched_job.h"

namespace {

using test_cli::contains;
using test_cli::run_command;
using namespace std::chrono_literals;

const std::string kFlowRun = FLOW_RUN_PATH;
const std::string kFlowRank = FLOW_RANK_PATH;

// The file whose creation lets the ranks of a job go on; absent at first.
std::string go_file(const std::string& name) {
  const std::string path = testing::TempDir() + "flow_run_go_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove(path);
  return path;
}

// The MASTER_PORT rank 0 reported joining on; -1 when it did not.
int joined_port(const std::string& output) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex(R"(\[rank0\]: rank 0 joined on port (\d+))"))) return -1;
  return std::stoi(match[1]);
}

// A job of three ranks that has rendezvoused and waits for go before using the store again.
class WaitingJob {
 public:
  explicit WaitingJob(const std::string& go)
      : job_({"--timeout", "90", "--kill-timeout", "2", "--nproc-per-node", "3", kFlowRank, "--job",
              "--subgroup-after", go}) {}

  // Whether every rank joined (within a bound); port() then is the job's MASTER_PORT.
  bool joined() { return job_.pid() > 0 && job_.read_until(" joined on port ", 3, 60s); }
  int port() const { return joined_port(job_.output()); }
  const std::string& output() const { return job_.output(); }

  // After go: the job must finish on its own, every rank done.
  void expect_finishes() {
    const std::optional<int> status = job_.wait(60s);
    ASSERT_TRUE(status) << "the first job did not finish:\n" << job_.output();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << job_.output();
    EXPECT_TRUE(contains(job_.output(), "[rank0]: rank 0 done: sum 3")) << job_.output();
    EXPECT_TRUE(contains(job_.output(), "[rank1]: rank 1 done: sum 3")) << job_.output();
    EXPECT_FALSE(contains(job_.output(), "aborted")) << job_.output();
  }

 private:
  launcher_test::LaunchedJob job_;
};

// A single rank 1 of another job (node 1 of two, so that no rank 0 of its own fails first and
// gets it stopped) reaches the running job's store: it is refused, and cannot abort that job.
TEST(FlowRunRdzvId, RankOfAnotherJobCanNeitherJoinNorAbortAJob) {
  const std::string go = go_file("stranger");
  WaitingJob first(go);
  ASSERT_TRUE(first.joined()) << first.output();
  const std::string port = std::to_string(first.port());
  const auto [status, output] = run_command(kFlowRun + " --timeout 60 --nnodes 2 --node-rank 1 --nproc-per-node 1" +
                                            " --master-port " + port + " --rdzv-id stranger " + kFlowRank +
                                            " --job --subgroup-after " + go);
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "[rank1]: [init_process_group] rank 1: the rendezvous store at 127.0.0.1:" + port +
                                   " belongs to another job: it serves rendezvous id '"))
      << output;
  EXPECT_TRUE(contains(output, "this rank has rendezvous id 'stranger'")) << output;
  std::ofstream(go) << "go\n";
  first.expect_finishes();
  std::filesystem::remove(go);
}

// The issue's case: a second job on the first one's port fails, and the first job finishes.
// Whichever of the second job's ranks fails first gets the others stopped: rank 0, which cannot
// serve the store, or a rank the first job's store refused.
TEST(FlowRunRdzvId, SecondJobOnTheSamePortFailsAndTheFirstFinishes) {
  const std::string go = go_file("second_job");
  WaitingJob first(go);
  ASSERT_TRUE(first.joined()) << first.output();
  const std::string port = std::to_string(first.port());
  const auto [status, output] = run_command(kFlowRun + " --timeout 60 --nproc-per-node 3 --master-port " + port +
                                            " " + kFlowRank + " --job --subgroup-after " + go);
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "[rank0]: [init_process_group] rank 0 cannot serve the rendezvous store on MASTER_PORT=" +
                                   port) ||
              contains(output, "belongs to another job"))
      << output;
  std::ofstream(go) << "go\n";
  first.expect_finishes();
  std::filesystem::remove(go);
}

// Two flow_run "nodes" on this machine given one --rdzv-id form one job of four ranks.
TEST(FlowRunRdzvId, NodesGivenOneIdFormOneJob) {
  const std::string go = go_file("nodes");
  std::ofstream(go) << "go\n";
  const std::string port = std::to_string(flow::testing::rendezvous_port());
  const auto node = [&](const std::string& node_rank) {
    return std::vector<std::string>{"--timeout", "60", "--nnodes", "2", "--node-rank", node_rank, "--nproc-per-node",
                                    "2", "--master-port", port, "--rdzv-id", "one-job", kFlowRank, "--job",
                                    "--subgroup-after", go};
  };
  launcher_test::LaunchedJob node0(node("0"));
  launcher_test::LaunchedJob node1(node("1"));
  for (launcher_test::LaunchedJob* job : {&node0, &node1}) {
    const std::optional<int> status = job->wait(60s);
    ASSERT_TRUE(status) << job->output();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << job->output();
  }
  EXPECT_TRUE(contains(node0.output(), "[rank0]: rank 0 done: sum 3")) << node0.output();
  EXPECT_TRUE(contains(node1.output(), "[rank3]: rank 3 done: sum 4")) << node1.output();
  std::filesystem::remove(go);
}

}  // namespace

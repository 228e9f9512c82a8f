// flow_run, the launcher: the environment each rank gets, its output prefixes, stopping the job
// when a rank fails, on a signal or on --timeout, and its usage errors. Every job runs under
// flow_run's own --timeout, so a launcher bug fails a test instead of hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "common/command_line.h"
#include "launcher/launched_job.h"

namespace {

using test_cli::contains;
using test_cli::run_command;
using namespace std::chrono_literals;

const std::string kFlowRun = FLOW_RUN_PATH;
const std::string kRankEcho = RANK_ECHO_PATH;

// flow_run with a generous --timeout (so a hang fails fast), then launcher_args, then rank_echo.
std::pair<int, std::string> run_job(const std::string& launcher_args, const std::string& rank_echo_args) {
  return run_command(kFlowRun + " --timeout 15 " + launcher_args + " -- " + kRankEcho + " " + rank_echo_args);
}

// rank -> variable -> value, from the "[rankR]: NAME=value" lines of rank_echo --print-env.
std::map<int, std::map<std::string, std::string>> environments(const std::string& output) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  const std::regex assignment(R"(^\[rank(\d+)\]: ([A-Z_]+)=(.*)$)");
  std::istringstream lines(output);
  std::smatch match;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, match, assignment)) by_rank[std::stoi(match[1])][match[2]] = match[3];
  }
  return by_rank;
}

void expect_environment_contract(int nproc, int nnodes, int node_rank, const std::string& port_args) {
  const auto [status, output] = run_job("--nproc-per-node " + std::to_string(nproc) + " --nnodes " +
                                            std::to_string(nnodes) + " --node-rank " + std::to_string(node_rank) +
                                            " " + port_args,
                                        "--print-env");
  ASSERT_EQ(status, 0) << output;
  const auto by_rank = environments(output);
  ASSERT_EQ(by_rank.size(), static_cast<size_t>(nproc)) << output;
  const std::string port = by_rank.begin()->second.at("MASTER_PORT");
  EXPECT_GT(std::stoi(port), 0);
  for (int local_rank = 0; local_rank < nproc; ++local_rank) {
    const int rank = node_rank * nproc + local_rank;
    ASSERT_TRUE(by_rank.count(rank)) << "no output from rank " << rank << ":\n" << output;
    const auto& variables = by_rank.at(rank);
    EXPECT_EQ(variables.at("RANK"), std::to_string(rank));
    EXPECT_EQ(variables.at("LOCAL_RANK"), std::to_string(local_rank));
    EXPECT_EQ(variables.at("WORLD_SIZE"), std::to_string(nproc * nnodes));
    EXPECT_EQ(variables.at("LOCAL_WORLD_SIZE"), std::to_string(nproc));
    EXPECT_EQ(variables.at("GROUP_RANK"), std::to_string(node_rank));
    EXPECT_EQ(variables.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(variables.at("MASTER_PORT"), port) << "every rank must get the same port";
    EXPECT_EQ(variables.at("FLOW_RDZV_ID"), by_rank.begin()->second.at("FLOW_RDZV_ID"));
    EXPECT_EQ(variables.at("FLOW_LINE_BUFFERED"), "1");
  }
}

TEST(FlowRunTest, HelpListsEveryFlag) {
  test_cli::expect_help_lists(kFlowRun, {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                                         "--master-port", "--rdzv-id", "--log-dir", "--tee", "--redirects",
                                         "--timeout", "--kill-timeout", "OMP_NUM_THREADS", "FLOW_RDZV_ID",
                                         "FLOW_LINE_BUFFERED"});
}

TEST(FlowRunTest, EnvironmentContractOnTwoRanks) { expect_environment_contract(2, 1, 0, ""); }

TEST(FlowRunTest, EnvironmentContractOnFourRanks) { expect_environment_contract(4, 1, 0, ""); }

TEST(FlowRunTest, SecondNodeRanksFollowTheFirstNodes) {
  expect_environment_contract(2, 2, 1, "--master-addr 127.0.0.1 --master-port 29555");
}

TEST(FlowRunTest, OmpNumThreadsIsOneUnlessSet) {
  const auto [status, output] = run_job("--nproc-per-node 1", "--print-env");
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(environments(output)[0]["OMP_NUM_THREADS"], "1");
  const auto [set_status, set_output] = run_command("OMP_NUM_THREADS=3 " + kFlowRun + " --timeout 15 " + kRankEcho +
                                                    " --print-env");
  ASSERT_EQ(set_status, 0) << set_output;
  EXPECT_EQ(environments(set_output)[0]["OMP_NUM_THREADS"], "3");
}

// The default --master-port 0 picks a port rank 0 can listen on and the others can reach.
TEST(FlowRunTest, PickedPortIsUsableByRankZero) {
  const auto [status, output] = run_job("--nproc-per-node 3", "--rendezvous");
  EXPECT_EQ(status, 0) << output;
  EXPECT_TRUE(contains(output, "[rank0]: rendezvous done on port")) << output;
}

// Many lines, each written in two pieces by each of two ranks and on both streams: every line
// is whole and prefixed; an unfinished last line still comes out.
TEST(FlowRunTest, EveryLineCarriesItsRankPrefix) {
  const int lines = 300;
  // OMP_NUM_THREADS given: flow_run's own note about it is no rank's line.
  const auto [status, output] = run_command("OMP_NUM_THREADS=1 " + kFlowRun + " --timeout 15 --nproc-per-node 2 -- " + kRankEcho +
                                            " --lines " + std::to_string(lines) + " --partial no-newline-at-end");
  ASSERT_EQ(status, 0) << output;
  const std::regex expected_line(R"(^\[rank([01])\]: ((line \d+ part-a part-b)|(error line \d+)|no-newline-at-end)$)");
  std::map<std::string, int> seen;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, expected_line)) << "unexpected line: '" << line << "'";
    const std::string kind = match[3].matched ? "line" : match[4].matched ? "error" : "tail";
    ++seen[match[1].str() + kind];
  }
  for (const std::string rank : {"0", "1"}) {
    EXPECT_EQ(seen[rank + "line"], lines);
    EXPECT_EQ(seen[rank + "error"], lines);
    EXPECT_EQ(seen[rank + "tail"], 1);
  }
}

TEST(FlowRunTest, ArgumentsAfterProgramReachItWithoutDoubleDash) {
  const auto [status, output] =
      run_command(kFlowRun + " --timeout 15 --nproc-per-node 1 " + kRankEcho + " --fail-rank 0 --exit-code 7");
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "exited with code 7")) << output;
}

TEST(FlowRunTest, FailingRankStopsTheOthersAndIsNamed) {
  const auto started = launcher_test::Clock::now();
  const auto [status, output] = run_job("--nproc-per-node 3", "--fail-rank 1 --exit-code 3 --sleep 60");
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "flow_run: job failed: rank 1 (local rank 1, pid")) << output;
  EXPECT_TRUE(contains(output, "exited with code 3 first")) << output;
  // The sleeping ranks were stopped, not waited for (and not --timeout's doing).
  EXPECT_FALSE(contains(output, "--timeout")) << output;
  EXPECT_LT(launcher_test::Clock::now() - started, 12s);
}

TEST(FlowRunTest, RankKilledBySignalIsNamed) {
  const auto [status, output] = run_job("--nproc-per-node 2", "--kill-self-rank 0 --sleep 60");
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "job failed: rank 0 (local rank 0")) << output;
  EXPECT_TRUE(contains(output, "was killed by signal 9")) << output;
}

// The ranks are signalled only once both ignore SIGTERM (a rank failing at once could stop the
// other before it installed SIG_IGN); the grace period ends with SIGKILL.
TEST(FlowRunTest, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  launcher_test::LaunchedJob job({"--timeout", "15", "--kill-timeout", "1", "--nproc-per-node", "2", kRankEcho,
                                  "--ignore-sigterm", "--sleep", "60"});
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.read_until(" ready\n", 2, 10s)) << job.output();
  kill(job.pid(), SIGTERM);
  const std::optional<int> status = job.wait(10s);
  ASSERT_TRUE(status) << "flow_run did not exit:\n" << job.output();
  ASSERT_TRUE(WIFEXITED(*status)) << job.output();
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGTERM) << job.output();
  EXPECT_TRUE(contains(job.output(), "ranks still running after --kill-timeout (1 s): 0 1; sending SIGKILL"))
      << job.output();
}

// A second signal while the ranks are being stopped does not wait for the (long) grace period.
TEST(FlowRunTest, SecondSignalKillsAtOnce) {
  launcher_test::LaunchedJob job({"--timeout", "60", "--kill-timeout", "60", "--nproc-per-node", "2", kRankEcho,
                                  "--ignore-sigterm", "--sleep", "60"});
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.read_until(" ready\n", 2, 10s)) << job.output();
  kill(job.pid(), SIGTERM);
  ASSERT_TRUE(job.read_until("forwarding it to every rank", 1, 10s)) << job.output();
  kill(job.pid(), SIGINT);
  const std::optional<int> status = job.wait(10s);
  ASSERT_TRUE(status) << "flow_run waited for the grace period:\n" << job.output();
  ASSERT_TRUE(WIFEXITED(*status)) << job.output();
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGTERM) << job.output();
  EXPECT_TRUE(contains(job.output(), "flow_run: got SIGINT while stopping; killing every rank")) << job.output();
}

TEST(FlowRunTest, TimeoutStopsTheJobWithStatus124) {
  const auto [status, output] =
      run_command(kFlowRun + " --timeout 1 --kill-timeout 1 --nproc-per-node 2 " + kRankEcho + " --sleep 60");
  EXPECT_EQ(status, 124) << output;
  EXPECT_TRUE(contains(output, "the job ran longer than --timeout (1 s)")) << output;
}

// SIGTERM or SIGINT to flow_run reaches every rank; flow_run exits 128 + the signal.
void expect_signal_forwarded(int signal, const std::string& name) {
  launcher_test::LaunchedJob job({"--timeout", "15", "--nproc-per-node", "2", kRankEcho, "--report-signals",
                                  "--sleep", "60"});
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.read_until(" ready\n", 2, 10s)) << job.output();
  kill(job.pid(), signal);
  const std::optional<int> status = job.wait(10s);
  ASSERT_TRUE(status) << "flow_run did not exit:\n" << job.output();
  ASSERT_TRUE(WIFEXITED(*status)) << job.output();
  EXPECT_EQ(WEXITSTATUS(*status), 128 + signal) << job.output();
  EXPECT_TRUE(contains(job.output(), "flow_run: got " + name + "; forwarding it to every rank")) << job.output();
  EXPECT_TRUE(contains(job.output(), "[rank0]: rank 0 got " + name)) << job.output();
  EXPECT_TRUE(contains(job.output(), "[rank1]: rank 1 got " + name)) << job.output();
}

TEST(FlowRunTest, SigtermIsForwardedToEveryRank) { expect_signal_forwarded(SIGTERM, "SIGTERM"); }

TEST(FlowRunTest, SigintIsForwardedToEveryRank) { expect_signal_forwarded(SIGINT, "SIGINT"); }

// Whether pid is gone, or a zombie nobody reaps (an orphan whose new parent does not wait).
bool process_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const size_t name_end = text.rfind(')');
  return name_end != std::string::npos && name_end + 2 < text.size() && text[name_end + 2] == 'Z';
}

TEST(FlowRunTest, NoRankOutlivesAKilledLauncher) {
  launcher_test::LaunchedJob job({"--timeout", "15", "--nproc-per-node", "2", kRankEcho, "--print-pid", "--sleep",
                                  "60"});
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.read_until(" ready\n", 2, 10s)) << job.output();
  std::vector<pid_t> rank_pids;
  const std::regex pid_line(R"(\[rank\d\]: pid=(\d+))");
  for (std::sregex_iterator match(job.output().begin(), job.output().end(), pid_line), end; match != end; ++match) {
    rank_pids.push_back(std::stoi((*match)[1]));
  }
  ASSERT_EQ(rank_pids.size(), 2u) << job.output();
  kill(job.pid(), SIGKILL);
  ASSERT_TRUE(job.wait(10s));
  for (const pid_t pid : rank_pids) {
    const auto deadline = launcher_test::Clock::now() + 10s;
    while (!process_ended(pid) && launcher_test::Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(process_ended(pid)) << "rank process " << pid << " outlived flow_run";
  }
}

TEST(FlowRunTest, UsageErrorsExitWithStatusTwo) {
  test_cli::expect_usage_error(kFlowRun, "--nproc-per-node 0 " + kRankEcho, "--nproc-per-node");
  test_cli::expect_usage_error(kFlowRun, "--nnodes 2 --node-rank 2 --master-port 29555 " + kRankEcho, "--node-rank");
  test_cli::expect_usage_error(kFlowRun, "--nproc-per-node 2", "PROGRAM");
  test_cli::expect_usage_error(kFlowRun, "--nproc-per-node 2 --", "PROGRAM");
  test_cli::expect_usage_error(kFlowRun, "--nproc-per-node 2 no_such_program_flow_run_test", "no_such_program");
  const std::string not_executable = testing::TempDir() + "flow_run_not_executable_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(not_executable) << "data\n";
  chmod(not_executable.c_str(), 0644);
  test_cli::expect_usage_error(kFlowRun, not_executable, not_executable);
  test_cli::expect_usage_error(kFlowRun, testing::TempDir(), testing::TempDir());
  test_cli::expect_usage_error(kFlowRun, "--nnodes 2 --node-rank 0 " + kRankEcho, "--master-port");
  test_cli::expect_usage_error(kFlowRun, "--master-port 70000 " + kRankEcho, "--master-port");
  test_cli::expect_usage_error(kFlowRun, "--timeout 0 " + kRankEcho, "--timeout");
  test_cli::expect_usage_error(kFlowRun, "--tee 1 " + kRankEcho, "--tee needs --log-dir");
  test_cli::expect_usage_error(kFlowRun, "--redirects 3 " + kRankEcho, "--redirects needs --log-dir");
  test_cli::expect_usage_error(kFlowRun, "--log-dir /tmp --tee 4 " + kRankEcho, "--tee");
  test_cli::expect_usage_error(kFlowRun, "--rdzv-id '' " + kRankEcho, "--rdzv-id");
  test_cli::expect_usage_error(kFlowRun, "--log-dir " + not_executable + "/logs " + kRankEcho, "--log-dir");
}

}  // namespace

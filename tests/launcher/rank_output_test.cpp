// What the ranks print, as flow_run shows it: lines of a program linked with flow arrive while it
// runs (its stdout is a pipe, which stdio would block-buffer), a killed rank keeps the lines it
// printed, and --log-dir, --tee and --redirects write each rank's streams to files.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/command_line.h"
#include "launcher/launched_job.h"

namespace {

using test_cli::contains;
using test_cli::run_command;
using namespace std::chrono_literals;

const std::string kFlowRun = FLOW_RUN_PATH;
const std::string kRankEcho = RANK_ECHO_PATH;
const std::string kFlowRank = FLOW_RANK_PATH;

// A fresh, empty directory for one test's log files.
std::string empty_directory(const std::string& name) {
  const std::string directory = testing::TempDir() + "flow_run_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(directory);
  return directory;
}

// The file's contents; "<missing>" when it does not exist.
std::string file_text(const std::string& path) {
  std::ifstream file(path);
  if (!file) return "<missing>";
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// Each rank prints a line through std::cout without flushing, then sleeps: the line shows while
// it sleeps, not when it exits.
TEST(FlowRunOutput, LinesShowWhileTheRankRuns) {
  launcher_test::LaunchedJob job({"--timeout", "60", "--kill-timeout", "1", "--nproc-per-node", "2", kFlowRank,
                                  "--print", "step 1 of 90", "--sleep", "60"});
  ASSERT_GT(job.pid(), 0);
  EXPECT_TRUE(job.read_until("]: step 1 of 90\n", 2, 20s)) << "no line while the ranks ran:\n" << job.output();
  EXPECT_TRUE(contains(job.output(), "[rank0]: step 1 of 90\n")) << job.output();
  EXPECT_TRUE(contains(job.output(), "[rank1]: step 1 of 90\n")) << job.output();
  kill(job.pid(), SIGTERM);
  EXPECT_TRUE(job.wait(20s)) << "flow_run did not exit:\n" << job.output();
}

// A rank killed by a signal (stdio flushes nothing then) keeps the lines it printed, on the
// console and in its log file.
TEST(FlowRunOutput, KilledRankKeepsItsLines) {
  const std::string logs = empty_directory("killed_rank_logs");
  const auto [status, output] = run_command(kFlowRun + " --timeout 30 --log-dir " + logs + " --nproc-per-node 1 " +
                                            kFlowRank + " --print 'last words' --kill-self");
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "was killed by signal 9")) << output;
  EXPECT_TRUE(contains(output, "[rank0]: last words\n")) << output;
  EXPECT_EQ(file_text(logs + "/0/stdout.log"), "last words\n");
  std::filesystem::remove_all(logs);
}

// --log-dir alone: both streams of every rank in DIR/<rank>/, as the rank wrote them (an
// unfinished last line too), and still on the console, prefixed.
TEST(FlowRunOutput, LogDirHoldsEveryRanksStreams) {
  const std::string logs = empty_directory("logs");
  const auto [status, output] = run_command(kFlowRun + " --timeout 15 --log-dir " + logs + " --nproc-per-node 2 " +
                                            kRankEcho + " --lines 2 --partial tail");
  ASSERT_EQ(status, 0) << output;
  for (const std::string rank : {"0", "1"}) {
    EXPECT_EQ(file_text(logs + "/" + rank + "/stdout.log"), "line 0 part-a part-b\nline 1 part-a part-b\ntail");
    EXPECT_EQ(file_text(logs + "/" + rank + "/stderr.log"), "error line 0\nerror line 1\n");
    EXPECT_TRUE(contains(output, "[rank" + rank + "]: line 1 part-a part-b\n")) << output;
    EXPECT_TRUE(contains(output, "[rank" + rank + "]: error line 1\n")) << output;
    EXPECT_TRUE(contains(output, "[rank" + rank + "]: tail\n")) << output;
  }
  std::filesystem::remove_all(logs);
}

// torchrun's meanings: --redirects sends streams to the files instead of the console, --tee to
// both; a stream named by neither goes to the console only.
TEST(FlowRunOutput, RedirectsAndTeeChooseTheStreams) {
  const std::string redirected = empty_directory("redirected_logs");
  const auto [status, output] = run_command(kFlowRun + " --timeout 15 --log-dir " + redirected +
                                            " --redirects 1 --nproc-per-node 1 " + kRankEcho + " --lines 2");
  ASSERT_EQ(status, 0) << output;
  EXPECT_FALSE(contains(output, "part-a")) << output;
  EXPECT_TRUE(contains(output, "[rank0]: error line 1\n")) << output;
  EXPECT_EQ(file_text(redirected + "/0/stdout.log"), "line 0 part-a part-b\nline 1 part-a part-b\n");
  EXPECT_EQ(file_text(redirected + "/0/stderr.log"), "<missing>");

  const std::string teed = empty_directory("teed_logs");
  const auto [tee_status, tee_output] = run_command(kFlowRun + " --timeout 15 --log-dir " + teed +
                                                    " --tee 2 --nproc-per-node 1 " + kRankEcho + " --lines 2");
  ASSERT_EQ(tee_status, 0) << tee_output;
  EXPECT_TRUE(contains(tee_output, "[rank0]: line 1 part-a part-b\n")) << tee_output;
  EXPECT_TRUE(contains(tee_output, "[rank0]: error line 1\n")) << tee_output;
  EXPECT_EQ(file_text(teed + "/0/stdout.log"), "<missing>");
  EXPECT_EQ(file_text(teed + "/0/stderr.log"), "error line 0\nerror line 1\n");

  const std::string silent = empty_directory("silent_logs");
  const auto [silent_status, silent_output] = run_command(kFlowRun + " --timeout 15 --log-dir " + silent +
                                                          " --redirects 3 --nproc-per-node 1 " + kRankEcho + " --lines 2");
  ASSERT_EQ(silent_status, 0) << silent_output;
  EXPECT_EQ(silent_output, "");
  EXPECT_EQ(file_text(silent + "/0/stderr.log"), "error line 0\nerror line 1\n");
  for (const std::string& directory : {redirected, teed, silent}) std::filesystem::remove_all(directory);
}

// A rank linked with flow runs on the OMP_NUM_THREADS=1 flow_run gives it (torchrun's default, with
// torchrun's warning), or on what the user set: OMP_NUM_THREADS, and FLOW_NUM_THREADS above it.
TEST(FlowRunThreads, RanksRunOnTheThreadsTheEnvironmentGives) {
  const std::string job = kFlowRun + " --timeout 30 --nproc-per-node 2 " + kFlowRank + " --threads";
  const auto [status, output] = run_command("env -u OMP_NUM_THREADS -u FLOW_NUM_THREADS " + job);
  ASSERT_EQ(status, 0) << output;
  EXPECT_TRUE(contains(output, "[rank0]: threads 1")) << output;
  EXPECT_TRUE(contains(output, "[rank1]: threads 1")) << output;
  EXPECT_TRUE(contains(output, "flow_run: setting OMP_NUM_THREADS=1 for each rank")) << output;
  const auto [set_status, set_output] = run_command("env -u FLOW_NUM_THREADS OMP_NUM_THREADS=3 " + job);
  ASSERT_EQ(set_status, 0) << set_output;
  EXPECT_TRUE(contains(set_output, "[rank1]: threads 3")) << set_output;
  EXPECT_FALSE(contains(set_output, "setting OMP_NUM_THREADS")) << set_output;
  const auto [flow_status, flow_output] = run_command("env -u OMP_NUM_THREADS FLOW_NUM_THREADS=2 " + job);
  ASSERT_EQ(flow_status, 0) << flow_output;
  EXPECT_TRUE(contains(flow_output, "[rank0]: threads 2")) << flow_output;
  EXPECT_FALSE(contains(flow_output, "setting OMP_NUM_THREADS")) << flow_output;
}

}  // namespace

// flow's default OpenMP wait policy (core/openmp_env/openmp_env.h), seen from real programs:
// libgomp itself reports what it read at start-up (OMP_DISPLAY_ENV=VERBOSE), and flow's log says
// where the setting came from. The user's GOMP_SPINCOUNT or OMP_WAIT_POLICY always wins.
#include <gtest/gtest.h>

#include "common/command_line.h"
#include "common/scratch_dir.h"

using test_cli::contains;
using test_cli::run_command;

namespace {

// `program args` with OpenMP's and flow's start-up reports on, the wait variables unset except
// `variables` ("NAME=value ...").
std::string start_up_report(const std::string& program, const std::string& args, const std::string& variables) {
  const auto [status, output] = run_command("env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY " + variables +
                                            " OMP_DISPLAY_ENV=VERBOSE GLOG_v=1 GLOG_logtostderr=1 " + program + " " + args);
  EXPECT_EQ(status, 0) << output;
  return output;
}

class OpenMpWaitTest : public ::testing::Test {
 protected:
  // A run of the eager quickstart that computes (so flow logs its thread choice) and saves.
  std::string eager_args() const { return "--epochs=0 --out " + (scratch_ / "eager.safetensors").string(); }
  flow::testing::ScratchDir scratch_;
};

TEST_F(OpenMpWaitTest, FlowSetsAShortSpinBeforeLibgompStarts) {
  for (const std::string program : {QUICKSTART_GRAPH_PATH, QUICKSTART_EAGER_PATH}) {
    const std::string output = start_up_report(program, "--help", "");
    EXPECT_TRUE(contains(output, "GOMP_SPINCOUNT = '1000'")) << program << ":\n" << output;
  }
  const std::string output = start_up_report(QUICKSTART_EAGER_PATH, eager_args(), "");
  EXPECT_TRUE(contains(output, "OpenMP waits with GOMP_SPINCOUNT=1000 (flow's default)")) << output;
}

TEST_F(OpenMpWaitTest, TheUsersSpinCountWins) {
  const std::string output = start_up_report(QUICKSTART_EAGER_PATH, eager_args(), "GOMP_SPINCOUNT=12345");
  EXPECT_TRUE(contains(output, "GOMP_SPINCOUNT = '12345'")) << output;
  EXPECT_TRUE(contains(output, "OpenMP waits with GOMP_SPINCOUNT=12345 (from the environment)")) << output;
}

TEST_F(OpenMpWaitTest, TheUsersWaitPolicyWins) {
  const std::string output = start_up_report(QUICKSTART_EAGER_PATH, eager_args(), "OMP_WAIT_POLICY=active");
  EXPECT_TRUE(contains(output, "OMP_WAIT_POLICY = 'ACTIVE'")) << output;
  EXPECT_FALSE(contains(output, "GOMP_SPINCOUNT = '1000'")) << output;
  EXPECT_TRUE(contains(output, "OpenMP waits with OMP_WAIT_POLICY=active (from the environment)")) << output;
}

}  // namespace

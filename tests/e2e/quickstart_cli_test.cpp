// The quickstart programs' command lines: --help, bad flags (exit status 2 naming the flag), and a
// run of zero epochs that still saves the state and, for the Graph quickstart, exports the model.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/command_line.h"
#include "common/scratch_dir.h"
#include "data/vision.h"

namespace fs = std::filesystem;
using test_cli::contains;
using test_cli::run_command;

namespace {

class QuickstartCliTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (scratch_ / name).string(); }
  flow::testing::ScratchDir scratch_;
};

TEST_F(QuickstartCliTest, CommandLineErrorsNameTheFlag) {
  for (const std::string tool : {QUICKSTART_GRAPH_PATH, QUICKSTART_EAGER_PATH}) {
    test_cli::expect_help_lists(tool, {"--epochs", "--data", "--out"});
    test_cli::expect_usage_error(tool, "--epochs -1", "--epochs");
    test_cli::expect_usage_error(tool, "--epochs five", "--epochs");
    test_cli::expect_usage_error(tool, "--data " + path("nowhere"), "--data");
    test_cli::expect_usage_error(tool, "--out", "--out");
    test_cli::expect_usage_error(tool, "--lr 0.1", "--lr");
  }
  test_cli::expect_help_lists(QUICKSTART_GRAPH_PATH, {"--export"});
  test_cli::expect_usage_error(QUICKSTART_EAGER_PATH, "--export " + path("model"), "--export");
}

TEST_F(QuickstartCliTest, ZeroEpochsSavesAndExports) {
  if (!fs::exists(flow::data::FashionMNIST::kDefaultRoot)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const std::string data = flow::data::FashionMNIST::kDefaultRoot;
  const auto [status, output] = run_command(std::string(QUICKSTART_GRAPH_PATH) + " --epochs 0 --data " + data + " --out=" +
                                            path("graph.safetensors") + " --export " + path("repository/fashion_mnist/1"));
  ASSERT_EQ(status, 0) << output;
  EXPECT_TRUE(contains(output, "Done!")) << output;
  EXPECT_TRUE(fs::exists(path("graph.safetensors")));
  EXPECT_TRUE(fs::exists(path("repository/fashion_mnist/1/model.pb")));

  const auto [eager_status, eager_output] =
      run_command(std::string(QUICKSTART_EAGER_PATH) + " --epochs=0 --out " + path("eager.safetensors"));
  ASSERT_EQ(eager_status, 0) << eager_output;
  EXPECT_TRUE(contains(eager_output, "Saved flow Model State to " + path("eager.safetensors"))) << eager_output;
  EXPECT_TRUE(fs::exists(path("eager.safetensors")));
}

}  // namespace

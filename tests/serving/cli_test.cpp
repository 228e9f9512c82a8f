// flow_client and flow_loadgen from the command line against a server on 127.0.0.1: each command
// works, --help lists the options, and bad flags exit with status 2 naming the flag.
#include "common/command_line.h"
#include "serving_test_util.h"

namespace st = serving_test;
using test_cli::contains;
using test_cli::run_command;

namespace {

class ServingCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_sum_product(repo_.version_dir("sum_product", 1));
    server_ = st::start_server(repo_.root());
    url_ = "127.0.0.1:" + std::to_string(server_->grpc_port());
  }
  // The tool's output; expects exit status `status`.
  std::string run(const std::string& command, int status = 0) const {
    const auto [exit_status, output] = run_command(command);
    EXPECT_EQ(exit_status, status) << command << "\n" << output;
    return output;
  }
  const std::string client_ = FLOW_CLIENT_PATH;
  const std::string loadgen_ = FLOW_LOADGEN_PATH;
  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::string url_;
};

TEST_F(ServingCliTest, ClientCommands) {
  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " live"), "live: true"));
  // Options of flow_client itself may follow the command, in either form.
  EXPECT_TRUE(contains(run(client_ + " ready --model sum_product --url=" + url_), "ready: true"));
  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " ready --model nothing", 1), "ready: false"));
  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " health"), "SERVING"));
  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " metadata"), "server flow"));
  const std::string metadata = run(client_ + " --url " + url_ + " metadata --model sum_product");
  EXPECT_TRUE(contains(metadata, "input  a FP32 [-1,4]")) << metadata;
  EXPECT_TRUE(contains(metadata, "output product FP32 [-1,4]")) << metadata;

  const std::string sum = run(client_ + " --url " + url_ +
                              " infer --model sum_product --input a=1,2,3,4 --input=b=10,20,30,40 --output sum");
  EXPECT_TRUE(contains(sum, "sum FP32 [1,4]: 11 22 33 44")) << sum;
  EXPECT_FALSE(contains(sum, "product")) << sum;
  // Inputs without values are 0, 1, 2, ...; -1 becomes --batch.
  const std::string batch = run(client_ + " --url " + url_ + " infer --model sum_product --batch 2 --output product");
  EXPECT_TRUE(contains(batch, "product FP32 [2,4]: 0 1 4 9 16 25 36 49")) << batch;

  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " infer --model sum_product --input a=1,2", 1), "needs 4 values"));
  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " infer --model sum_product --input c=1,2,3,4", 1),
                       "no input named c"));
  EXPECT_TRUE(contains(run(client_ + " --url " + url_ + " infer --model nothing", 1), "flow_client: "));
}

TEST_F(ServingCliTest, ClientCommandLine) {
  test_cli::expect_help_lists(client_, {"--url", "live", "ready", "health", "metadata", "infer"});
  test_cli::expect_help_lists(client_ + " infer", {"--model", "--version", "--batch", "--input", "--output"});
  test_cli::expect_help_lists(client_ + " health", {"--service"});
  test_cli::expect_usage_error(client_, "", "A command (live, ready, health, metadata or infer) is required");
  test_cli::expect_usage_error(client_, "frobnicate", "frobnicate");
  test_cli::expect_usage_error(client_, "--bogus 1 live", "--bogus");
  test_cli::expect_usage_error(client_, "live --url", "--url");
  test_cli::expect_usage_error(client_, "infer", "--model is required");
  test_cli::expect_usage_error(client_, "infer --model m --batch -3", "--batch");
  test_cli::expect_usage_error(client_, "infer --model m --batch abc", "--batch");
  test_cli::expect_usage_error(client_, "infer --model m --input a=1,x", "--input");
  test_cli::expect_usage_error(client_, "infer --model m --input 1,2", "--input");
  test_cli::expect_usage_error(client_, "health --model m", "--model");
}

TEST_F(ServingCliTest, LoadgenRunsAgainstTheServer) {
  const std::string metrics_url = "127.0.0.1:" + std::to_string(server_->metrics_port());
  const std::string closed = run(loadgen_ + " --url " + url_ + " --metrics-url=" + metrics_url +
                                 " --model sum_product --concurrency 2 --requests 20");
  EXPECT_TRUE(contains(closed, "concurrency 2, batch 1")) << closed;
  EXPECT_TRUE(contains(closed, "requests: 20 sent, 20 succeeded, 0 failed")) << closed;
  EXPECT_TRUE(contains(closed, "server per request (us): queue")) << closed;
  EXPECT_FALSE(contains(closed, "down")) << closed;

  const std::string open = run(loadgen_ + " --url " + url_ + " --model sum_product --rate 200 --requests 10 --batch 3");
  EXPECT_TRUE(contains(open, "fixed rate 200/s, batch 3")) << open;
  EXPECT_TRUE(contains(open, "requests: 10 sent, 10 succeeded, 0 failed")) << open;

  EXPECT_TRUE(contains(run(loadgen_ + " --url " + url_ + " --empty-rpcs 5"), "empty round trip (ServerLive) over 5 calls"));
  EXPECT_TRUE(contains(run(loadgen_ + " --url " + url_ + " --model nothing --requests 1", 1), "flow_loadgen: "));
}

TEST_F(ServingCliTest, LoadgenCommandLine) {
  test_cli::expect_help_lists(loadgen_, {"--url", "--metrics-url", "--model", "--version", "--batch", "--input",
                                         "--concurrency", "--rate", "--requests", "--seconds", "--empty-rpcs"});
  test_cli::expect_usage_error(loadgen_, "", "--model is required");
  test_cli::expect_usage_error(loadgen_, "--model m --concurrency 0", "--concurrency");
  test_cli::expect_usage_error(loadgen_, "--model m --rate -1", "--rate");
  test_cli::expect_usage_error(loadgen_, "--model m --seconds abc", "--seconds");
  test_cli::expect_usage_error(loadgen_, "--model m --seconds 1e300", "--seconds");
  test_cli::expect_usage_error(loadgen_, "--model m --rate inf", "--rate");
  test_cli::expect_usage_error(loadgen_, "--model m --requests=-5", "--requests");
  test_cli::expect_usage_error(loadgen_, "--model m --batch 0", "--batch");
  test_cli::expect_usage_error(loadgen_, "--model m --metrics-url localhost", "--metrics-url");
  test_cli::expect_usage_error(loadgen_, "--model m --concurrency 2 --rate 5", "--concurrency");
  test_cli::expect_usage_error(loadgen_, "--model m --requests 5 --seconds 1", "--seconds");
  test_cli::expect_usage_error(loadgen_, "--model m --empty-rpcs 0", "--empty-rpcs");
  test_cli::expect_usage_error(loadgen_, "--model m --warmup 3", "--warmup");
}

}  // namespace

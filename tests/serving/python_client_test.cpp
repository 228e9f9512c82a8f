// A user's view of the REST endpoint: tests/serving/rest_client.py (urllib and curl, nothing
// else) against a flow_serve process started here and terminated at the end.
#include <cstdlib>

#include "serving_test_util.h"

namespace st = serving_test;

namespace {

TEST(PythonClientTest, UrllibAndCurlAgainstFlowServe) {
  st::Repository repo;
  st::export_affine(repo.version_dir("affine", 1), 3.0f);
  st::ServeProcess serve(repo.root());
  ASSERT_GT(serve.pid, 0);
  const std::string command = "timeout 120 python3 " FLOW_REST_CLIENT_SCRIPT " " + std::to_string(serve.http_port) +
                              " " + std::to_string(serve.metrics_port);
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << ": status " << status;
  const int exit_status = serve.terminate();
  EXPECT_TRUE(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0);
}

}  // namespace

// Several versions of a model served at once: requests may name any served version, an
// unversioned request gets the newest; config.pbtxt's version_policy (all / latest N /
// specific) picks which versions on disk are served.
#include "serving_test_util.h"

namespace st = serving_test;
using grpc::StatusCode;

namespace {

// Version v of "affine" answers y = v * x, so an answer tells which version computed it.
class VersionsTest : public ::testing::Test {
 protected:
  void start(const std::vector<int>& versions, const std::string& config = "") {
    for (int version : versions) st::publish_affine(repo_, version, static_cast<float>(version));
    if (!config.empty()) repo_.write_config("affine", config);
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }

  // Infers x = (1, 2, 3, 4) naming `version` ("" for none); returns the status and, when it is OK,
  // checks that the answer is the one of the version that says it answered.
  grpc::Status infer(const std::string& version, std::string* answered_by = nullptr) {
    auto request = flow::serving::make_infer_request("affine", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})});
    request.set_model_version(version);
    inference::ModelInferResponse response;
    const grpc::Status status = client_->infer(request, response);
    if (status.ok()) {
      const float scale = std::stof(response.model_version());
      EXPECT_EQ(st::fp32_values(response.raw_output_contents(0)),
                (std::vector<float>{scale, 2 * scale, 3 * scale, 4 * scale}));
      if (answered_by) *answered_by = response.model_version();
    }
    return status;
  }

  std::string answered_by(const std::string& version) {
    std::string answer;
    const grpc::Status status = infer(version, &answer);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return answer;
  }

  std::vector<std::string> served() {
    const auto metadata = client_->model_metadata("affine");
    return {metadata.versions().begin(), metadata.versions().end()};
  }

  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
};

using Versions = std::vector<std::string>;

TEST_F(VersionsTest, EveryVersionOnDiskIsServedByDefault) {
  start({1, 2, 3});
  EXPECT_EQ(served(), (Versions{"1", "2", "3"}));
  EXPECT_EQ(answered_by(""), "3");
  EXPECT_EQ(answered_by("1"), "1");
  EXPECT_EQ(answered_by("2"), "2");
  EXPECT_EQ(answered_by("3"), "3");
  EXPECT_TRUE(client_->model_ready("affine", "1"));
  EXPECT_FALSE(client_->model_ready("affine", "4"));
  EXPECT_EQ(client_->model_metadata("affine", "1").inputs(0).name(), "x");

  const grpc::Status missing = infer("4");
  EXPECT_EQ(missing.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(missing.error_message().find("'4'"), std::string::npos) << missing.error_message();
  EXPECT_NE(missing.error_message().find("1, 2, 3"), std::string::npos) << missing.error_message();
  EXPECT_EQ(infer("latest").error_code(), StatusCode::NOT_FOUND);

  // Each version counts its own requests.
  EXPECT_EQ(st::metric(*server_, "nv_inference_request_success", "affine", "1"), 1);
  EXPECT_EQ(st::metric(*server_, "nv_inference_request_success", "affine", "3"), 2);
}

TEST_F(VersionsTest, LatestPolicyServesTheNewestVersionsThatLoad) {
  start({1, 2}, "version_policy { latest { num_versions: 2 } }");
  st::write_file(repo_.version_dir("affine", 3) / "model.pb", "corrupt");
  EXPECT_EQ(server_->repository().poll(), 1);
  EXPECT_EQ(served(), (Versions{"1", "2"}));  // version 3 does not load: 1 and 2 stay

  st::fs::remove_all(repo_.version_dir("affine", 3));
  st::publish_affine(repo_, 4, 4.0f);
  EXPECT_EQ(server_->repository().poll(), 0);
  EXPECT_EQ(served(), (Versions{"2", "4"}));  // version 1 leaves the newest two
  EXPECT_EQ(infer("1").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(answered_by(""), "4");
  EXPECT_EQ(answered_by("2"), "2");
}

TEST_F(VersionsTest, SpecificPolicyServesTheListedVersionsOnDisk) {
  start({1, 2, 3}, "version_policy { specific { versions: [1, 3, 9] } }");
  EXPECT_EQ(served(), (Versions{"1", "3"}));
  EXPECT_EQ(infer("2").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(answered_by(""), "3");

  // The policy is read on every poll: a changed config re-selects the versions.
  repo_.write_config("affine", "version_policy { specific { versions: [2] } }");
  EXPECT_EQ(server_->repository().poll(), 0);
  EXPECT_EQ(served(), (Versions{"2"}));
  EXPECT_EQ(answered_by(""), "2");
}

TEST_F(VersionsTest, AnInvalidPolicyLoadsNothingAndABrokenConfigKeepsTheServedVersions) {
  start({1}, "version_policy { latest { num_versions: 0 } }");
  EXPECT_FALSE(client_->model_ready("affine"));
  EXPECT_EQ(server_->repository().poll(), 0);  // the same failure is not counted twice

  repo_.write_config("affine", "version_policy { specific { versions: [] } }");
  EXPECT_EQ(server_->repository().poll(), 1);
  repo_.write_config("affine", "version_policy { specific { versions: [-1] } }");
  EXPECT_EQ(server_->repository().poll(), 1);

  repo_.write_config("affine", "version_policy { all {} }");
  EXPECT_EQ(server_->repository().poll(), 0);
  EXPECT_EQ(answered_by(""), "1");

  repo_.write_config("affine", "version_policy { no_such_policy {} }");
  EXPECT_EQ(server_->repository().poll(), 1);
  EXPECT_EQ(answered_by(""), "1");
}

}  // namespace

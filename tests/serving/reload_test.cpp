// Model versions without downtime: a new version is loaded and swapped in (under the default
// policy next to the old one, under "latest 1" in its place while the old one drains), a corrupt
// version leaves the others serving, a removed version falls back to the previous one, all while
// a client sends unversioned requests at a fixed rate and not one request fails.
#include "serving/loadgen.h"
#include "serving_test_util.h"

namespace st = serving_test;

namespace {

void publish_corrupt(const st::Repository& repo, int version) {
  st::write_file(repo.version_dir("affine", version) / "model.pb", "this is not a protobuf");
  st::write_file(repo.version_dir("affine", version) / "weights.safetensors", "nor safetensors");
}

// The version an unversioned request gets: the newest served.
std::string served_version(flow::serving::Client& client) {
  const auto metadata = client.model_metadata("affine");
  return metadata.versions(metadata.versions_size() - 1);
}

int served_versions(flow::serving::Client& client) { return client.model_metadata("affine").versions_size(); }

// The model's config.pbtxt: its version policy.
class ReloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReloadTest, VersionsChangeUnderFixedRateLoadWithoutAFailedRequest) {
  st::Repository repo;
  st::publish_affine(repo, 1, 1.0f);
  repo.write_config("affine", GetParam());
  const bool latest_only = !GetParam().empty();
  auto server = st::start_server(repo.root());
  auto client = st::connect(*server);

  // Version v answers y = v * x.
  std::atomic<int64_t> answered{0};
  std::map<std::string, int64_t> by_version;
  std::mutex by_version_mutex;
  auto make = [](int64_t seq) {
    const float v = static_cast<float>(seq % 50);
    return flow::serving::make_infer_request("affine", {st::fp32_tensor("x", {1, 4}, {v, v + 1, v + 2, v + 3})});
  };
  auto check = [&](int64_t seq, const inference::ModelInferResponse& response) -> std::string {
    const float v = static_cast<float>(seq % 50), scale = std::stof(response.model_version());
    ++answered;
    {
      std::lock_guard lock(by_version_mutex);
      ++by_version[response.model_version()];
    }
    const std::vector<float> expected{scale * v, scale * (v + 1), scale * (v + 2), scale * (v + 3)};
    return st::fp32_values(response.raw_output_contents(0)) == expected ? "" : "wrong output for its version";
  };
  flow::serving::LoadOptions options;
  options.rate = 200;
  options.requests = 600;
  flow::serving::LoadReport report;
  std::thread load([&] { report = flow::serving::run_load(*client, options, make, check); });

  ASSERT_TRUE(st::eventually([&] { return answered > 100; }));
  st::publish_affine(repo, 2, 2.0f);
  EXPECT_EQ(server->repository().poll(), 0);
  EXPECT_EQ(served_version(*client), "2");
  EXPECT_EQ(served_versions(*client), latest_only ? 1 : 2);

  ASSERT_TRUE(st::eventually([&] { return answered > 250; }));
  publish_corrupt(repo, 3);
  EXPECT_EQ(server->repository().poll(), 1);  // version 3 fails to load ...
  EXPECT_EQ(served_version(*client), "2");    // ... and version 2 keeps serving
  EXPECT_EQ(server->repository().poll(), 0);  // not retried while its files stay the same

  ASSERT_TRUE(st::eventually([&] { return answered > 400; }));
  st::fs::remove_all(repo.version_dir("affine", 2));
  EXPECT_EQ(server->repository().poll(), 0);
  EXPECT_EQ(served_version(*client), "1");  // the newest version that loads

  load.join();
  EXPECT_EQ(report.failed, 0) << report.first_failure;
  EXPECT_EQ(report.succeeded, 600);
  EXPECT_GT(by_version["1"], 0);
  EXPECT_GT(by_version["2"], 0);
}

INSTANTIATE_TEST_SUITE_P(VersionPolicies, ReloadTest,
                         ::testing::Values("", "version_policy { latest { num_versions: 1 } }"),
                         [](const auto& info) { return info.param.empty() ? "All" : "Latest1"; });

TEST(ReloadPollTest, PollingThreadPicksUpNewVersionsAndModels) {
  st::Repository repo;
  st::publish_affine(repo, 1, 1.0f);
  flow::serving::ServerOptions options;
  options.repository_poll_interval = std::chrono::milliseconds(20);
  auto server = st::start_server(repo.root(), options);
  auto client = st::connect(*server);
  st::publish_affine(repo, 4, 4.0f);
  EXPECT_TRUE(st::eventually([&] { return served_version(*client) == "4"; }));
  st::export_sum_product(repo.version_dir("sum_product", 1));
  EXPECT_TRUE(st::eventually([&] { return client->model_ready("sum_product"); }));
  st::fs::remove_all(repo.root() / "sum_product");
  EXPECT_TRUE(st::eventually([&] { return !client->model_ready("sum_product"); }));
}

}  // namespace

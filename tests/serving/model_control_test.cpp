// Explicit model control and the repository extension (Triton's): only the named models load at
// start; RepositoryIndex lists every model directory with its state; RepositoryModelLoad and
// RepositoryModelUnload (gRPC) and /v2/repository/... (REST) change what is served; poll mode
// refuses them; the bearer token guards them.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serving_test_util.h"

namespace st = serving_test;
using grpc::StatusCode;
using nlohmann::json;

namespace {

class ModelControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_affine(repo_.version_dir("affine", 1), 2.0f);
    st::export_sum_product(repo_.version_dir("sum_product", 1));
  }

  void start(std::set<std::string> models, bool explicit_control = true) {
    flow::serving::ServerOptions options;
    options.explicit_model_control = explicit_control;
    options.explicit_models = std::move(models);
    options.access = access_;
    server_ = st::start_server(repo_.root(), options);
    client_ = st::connect(*server_);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    http_->set_read_timeout(60);
  }

  StatusCode infer_affine() {
    inference::ModelInferResponse response;
    return client_->infer(flow::serving::make_infer_request("affine", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})}), response)
        .error_code();
  }

  grpc::Status load(const std::string& model, const std::string& token = "") {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    inference::RepositoryModelLoadRequest request;
    request.set_model_name(model);
    inference::RepositoryModelLoadResponse response;
    return client_->stub().RepositoryModelLoad(&context, request, &response);
  }

  grpc::Status unload(const std::string& model) {
    grpc::ClientContext context;
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name(model);
    inference::RepositoryModelUnloadResponse response;
    return client_->stub().RepositoryModelUnload(&context, request, &response);
  }

  // name -> "version:state" for each entry of the index.
  std::multimap<std::string, std::string> index(bool ready_only = false) {
    grpc::ClientContext context;
    inference::RepositoryIndexRequest request;
    request.set_ready(ready_only);
    inference::RepositoryIndexResponse response;
    EXPECT_TRUE(client_->stub().RepositoryIndex(&context, request, &response).ok());
    std::multimap<std::string, std::string> entries;
    for (const auto& model : response.models()) entries.emplace(model.name(), model.version() + ":" + model.state());
    return entries;
  }

  st::Repository repo_;
  flow::serving::AccessPolicy access_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
  std::unique_ptr<httplib::Client> http_;
};

using Entries = std::multimap<std::string, std::string>;

TEST_F(ModelControlTest, OnlyTheNamedModelsLoadAndTheApiLoadsAndUnloads) {
  start({"affine"});
  EXPECT_EQ(infer_affine(), StatusCode::OK);
  EXPECT_EQ(index(), (Entries{{"affine", "1:READY"}, {"sum_product", ":UNAVAILABLE"}}));
  EXPECT_EQ(index(true), (Entries{{"affine", "1:READY"}}));

  ASSERT_TRUE(load("sum_product").ok());
  EXPECT_TRUE(client_->model_ready("sum_product"));
  ASSERT_TRUE(unload("affine").ok());
  EXPECT_EQ(infer_affine(), StatusCode::NOT_FOUND);
  EXPECT_EQ(index(), (Entries{{"affine", ":UNAVAILABLE"}, {"sum_product", "1:READY"}}));

  // The same over REST.
  EXPECT_EQ(http_->Post("/v2/repository/models/affine/load", "", "application/json")->status, 200);
  EXPECT_EQ(infer_affine(), StatusCode::OK);
  EXPECT_EQ(http_->Post("/v2/repository/models/sum_product/unload", "", "application/json")->status, 200);
  EXPECT_FALSE(client_->model_ready("sum_product"));
  const auto listed = http_->Post("/v2/repository/index", "", "application/json");
  ASSERT_TRUE(listed);
  EXPECT_EQ(json::parse(listed->body),
            json::parse(R"([{"name": "affine", "version": "1", "state": "READY"},
                            {"name": "sum_product", "state": "UNAVAILABLE", "reason": "unloaded"}])"));
  EXPECT_EQ(json::parse(http_->Post("/v2/repository/index", R"({"ready": true})", "application/json")->body).size(), 1u);
  EXPECT_EQ(http_->Post("/v2/repository/index", R"({"ready": 1})", "application/json")->status, 400);
}

TEST_F(ModelControlTest, ALoadThatFailsSaysWhyAndARepairedModelLoads) {
  st::write_file(repo_.version_dir("broken", 1) / "model.pb", "not a model");
  start({});
  const grpc::Status failed = load("broken");
  EXPECT_EQ(failed.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(failed.error_message().find("model 'broken' did not load: broken/1:"), std::string::npos) << failed.error_message();
  EXPECT_EQ(index().count("broken"), 1u);
  EXPECT_EQ(index().find("broken")->second, "1:UNAVAILABLE");
  const auto rest = http_->Post("/v2/repository/models/broken/load", "", "application/json");
  EXPECT_EQ(rest->status, 400);
  EXPECT_NE(rest->body.find("did not load"), std::string::npos) << rest->body;

  st::export_affine(repo_.version_dir("broken", 2), 3.0f);
  ASSERT_TRUE(load("broken").ok());
  const auto metadata = client_->model_metadata("broken");
  EXPECT_EQ(std::vector<std::string>(metadata.versions().begin(), metadata.versions().end()), std::vector<std::string>{"2"});
}

TEST_F(ModelControlTest, UnknownModelsRepositoriesAndParametersAreErrors) {
  start({});
  EXPECT_EQ(load("nothing").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(load("../affine").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(http_->Post("/v2/repository/models/nothing/load", "", "application/json")->status, 404);
  grpc::ClientContext context;
  inference::RepositoryModelLoadRequest request;
  request.set_model_name("affine");
  request.set_repository_name("elsewhere");
  inference::RepositoryModelLoadResponse response;
  EXPECT_EQ(client_->stub().RepositoryModelLoad(&context, request, &response).error_code(), StatusCode::NOT_FOUND);
  grpc::ClientContext with_parameters;
  request.set_repository_name("");
  (*request.mutable_parameters())["config"].set_string_param("{}");
  EXPECT_EQ(client_->stub().RepositoryModelLoad(&with_parameters, request, &response).error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(ModelControlTest, StarLoadsEveryModel) {
  start({"*"});
  EXPECT_EQ(index(true), (Entries{{"affine", "1:READY"}, {"sum_product", "1:READY"}}));
}

TEST_F(ModelControlTest, PollModeRefusesLoadAndUnloadButListsTheIndex) {
  start({}, false);
  EXPECT_EQ(load("affine").error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(unload("affine").error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(http_->Post("/v2/repository/models/affine/unload", "", "application/json")->status, 400);
  EXPECT_EQ(index(true), (Entries{{"affine", "1:READY"}, {"sum_product", "1:READY"}}));
}

TEST_F(ModelControlTest, TheTokenGuardsTheRepositoryCalls) {
  access_.token = flow::serving::BearerToken("s3cret");
  start({});
  EXPECT_EQ(load("affine").error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(http_->Post("/v2/repository/models/affine/load", "", "application/json")->status, 401);
  EXPECT_EQ(http_->Post("/v2/repository/index", "", "application/json")->status, 401);
  EXPECT_TRUE(load("affine", "s3cret").ok());
}

}  // namespace

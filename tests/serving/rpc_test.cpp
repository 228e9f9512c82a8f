// Every RPC of inference.GRPCInferenceService, in both encodings, plus gRPC health and
// reflection, against exported models served over loopback.
#include <grpcpp/generic/generic_stub.h>

#include "common/test_util.h"
#include "serving_test_util.h"

namespace st = serving_test;
using flow::serving::Client;
using flow::serving::WireTensor;

namespace {

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_sum_product(repo_.version_dir("sum_product", 1));
    repo_.write_config("sum_product", "max_batch_size: 8");
    st::export_affine(repo_.version_dir("affine", 1), 1.0f);
    st::export_affine(repo_.version_dir("affine", 3), 3.0f);
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }
  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(RpcTest, HealthAndReadiness) {
  EXPECT_TRUE(client_->server_live());
  EXPECT_TRUE(client_->server_ready());
  EXPECT_TRUE(client_->model_ready("sum_product"));
  EXPECT_TRUE(client_->model_ready("affine", "3"));
  EXPECT_TRUE(client_->model_ready("affine", "1"));  // every version on disk is served
  EXPECT_FALSE(client_->model_ready("affine", "2"));
  EXPECT_FALSE(client_->model_ready("nope"));
  EXPECT_EQ(client_->health(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(client_->health("inference.GRPCInferenceService"), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_THROW(client_->health("no.such.Service"), flow::serving::RpcError);
}

TEST_F(RpcTest, ServerMetadata) {
  const auto metadata = client_->server_metadata();
  EXPECT_EQ(metadata.name(), "flow");
  EXPECT_FALSE(metadata.version().empty());
}

TEST_F(RpcTest, ModelMetadataShowsTheBatchDimensionAsMinusOne) {
  const auto metadata = client_->model_metadata("sum_product");
  EXPECT_EQ(metadata.name(), "sum_product");
  ASSERT_EQ(metadata.versions_size(), 1);
  EXPECT_EQ(metadata.versions(0), "1");
  EXPECT_EQ(metadata.platform(), "oneflow_lite");
  ASSERT_EQ(metadata.inputs_size(), 2);
  EXPECT_EQ(metadata.inputs(0).name(), "a");
  EXPECT_EQ(metadata.inputs(1).name(), "b");
  EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(metadata.inputs(0).shape().begin(), metadata.inputs(0).shape().end()),
            (std::vector<int64_t>{-1, 4}));
  ASSERT_EQ(metadata.outputs_size(), 2);
  EXPECT_EQ(metadata.outputs(0).name(), "sum");
  EXPECT_EQ(metadata.outputs(1).name(), "product");
  const auto versions = client_->model_metadata("affine", "3").versions();
  EXPECT_EQ(std::vector<std::string>(versions.begin(), versions.end()), (std::vector<std::string>{"1", "3"}));
}

TEST_F(RpcTest, InferWithRawContents) {
  const std::vector<float> a{1, 2, 3, 4, 5, 6, 7, 8}, b{8, 7, 6, 5, 4, 3, 2, 1};
  auto request = flow::serving::make_infer_request(
      "sum_product", {st::fp32_tensor("a", {2, 4}, a), st::fp32_tensor("b", {2, 4}, b)}, {}, "", "request-17");
  inference::ModelInferResponse response;
  ASSERT_TRUE(client_->infer(request, response).ok());
  EXPECT_EQ(response.model_name(), "sum_product");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(response.id(), "request-17");
  ASSERT_EQ(response.outputs_size(), 2);
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "sum");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
            (std::vector<int64_t>{2, 4}));
  EXPECT_FALSE(response.outputs(0).has_contents());
  EXPECT_EQ(st::fp32_values(response.raw_output_contents(0)), std::vector<float>(8, 9.0f));
  EXPECT_EQ(st::fp32_values(response.raw_output_contents(1)), (std::vector<float>{8, 14, 18, 20, 20, 18, 14, 8}));
}

// ModelStreamInfer: each request on the stream gets one response, an error as a response with
// error_message (the stream goes on); the call ends OK once the client half-closes.
TEST_F(RpcTest, StreamInferAnswersEachRequest) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = client_->stub().ModelStreamInfer(&context);
  const std::vector<float> a{1, 2, 3, 4}, b{4, 3, 2, 1};
  for (const char* id : {"first", "second"}) {
    ASSERT_TRUE(stream->Write(flow::serving::make_infer_request("sum_product", {st::fp32_tensor("a", {1, 4}, a), st::fp32_tensor("b", {1, 4}, b)},
                                                                {}, "", id)));
  }
  ASSERT_TRUE(stream->Write(flow::serving::make_infer_request("no_such_model", {st::fp32_tensor("a", {1, 4}, a)}, {}, "", "third")));
  ASSERT_TRUE(stream->WritesDone());
  std::map<std::string, inference::ModelStreamInferResponse> by_id;
  inference::ModelStreamInferResponse response;
  while (stream->Read(&response)) by_id[response.infer_response().id()] = response;
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(by_id.size(), 3u);
  for (const char* id : {"first", "second"}) {
    const auto& answer = by_id.at(id);
    EXPECT_EQ(answer.error_message(), "") << id;
    EXPECT_EQ(answer.infer_response().model_name(), "sum_product");
    ASSERT_EQ(answer.infer_response().raw_output_contents_size(), 2);
    EXPECT_EQ(st::fp32_values(answer.infer_response().raw_output_contents(0)), std::vector<float>(4, 5.0f));
  }
  EXPECT_NE(by_id.at("third").error_message().find("no_such_model"), std::string::npos) << by_id.at("third").error_message();
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(RpcTest, InferWithTypedContentsAnswersRaw) {
  inference::ModelInferRequest request;
  request.set_model_name("sum_product");
  for (const char* name : {"a", "b"}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    input->add_shape(1);
    input->add_shape(4);
    for (float v : {1.5f, -2.0f, 0.0f, 4.0f}) input->mutable_contents()->add_fp32_contents(v);
  }
  inference::ModelInferResponse response;
  const grpc::Status status = client_->infer(request, response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(st::fp32_values(response.raw_output_contents(0)), (std::vector<float>{3, -4, 0, 8}));
  EXPECT_EQ(st::fp32_values(response.raw_output_contents(1)), (std::vector<float>{2.25f, 4, 0, 16}));
}

TEST_F(RpcTest, RequestedOutputsComeInTheRequestedOrder) {
  const std::vector<WireTensor> inputs{st::fp32_tensor("a", {1, 4}, {1, 2, 3, 4}), st::fp32_tensor("b", {1, 4}, {2, 2, 2, 2})};
  auto only_product = client_->infer("sum_product", inputs, {"product"});
  ASSERT_EQ(only_product.size(), 1u);
  EXPECT_EQ(only_product[0].name, "product");
  EXPECT_EQ(st::fp32_values(only_product[0].data), (std::vector<float>{2, 4, 6, 8}));
  auto reversed = client_->infer("sum_product", inputs, {"product", "sum"});
  ASSERT_EQ(reversed.size(), 2u);
  EXPECT_EQ(reversed[0].name, "product");
  EXPECT_EQ(reversed[1].name, "sum");
  EXPECT_EQ(st::fp32_values(reversed[1].data), (std::vector<float>{3, 4, 5, 6}));
}

TEST_F(RpcTest, NamedVersionAndLatestVersion) {
  const std::vector<WireTensor> x{st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})};
  EXPECT_EQ(st::fp32_values(client_->infer("affine", x)[0].data), (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(st::fp32_values(client_->infer("affine", x, {}, "3")[0].data), (std::vector<float>{3, 6, 9, 12}));
}

// grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo with list_services, through a
// generic stub: the answer names the inference service.
TEST_F(RpcTest, ReflectionListsTheInferenceService) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  grpc::CompletionQueue queue;
  auto call = stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(queue.Next(&tag, &ok) && ok);
  // ServerReflectionRequest { list_services = 7: "" }
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  call->Write(grpc::ByteBuffer(&slice, 1), reinterpret_cast<void*>(2));
  ASSERT_TRUE(queue.Next(&tag, &ok) && ok);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(queue.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("inference.GRPCInferenceService"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  context.TryCancel();
  grpc::Status finish_status;
  call->Finish(&finish_status, reinterpret_cast<void*>(4));
  while (queue.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
}

}  // namespace

namespace {

TEST(PortTest, APortInUseIsAnErrorNotShared) {
  st::Repository repo;
  st::export_affine(repo.version_dir("affine", 1), 1.0f);
  auto first = st::start_server(repo.root());
  flow::serving::ServerOptions options;
  options.model_repository = repo.root().string();
  options.address = "127.0.0.1";
  options.grpc_port = first->grpc_port();
  options.http_port = -1;
  options.metrics_port = -1;
  EXPECT_THROW_MSG(flow::serving::Server{options}, "cannot listen for gRPC");
  options.grpc_port = 0;
  options.metrics_port = first->metrics_port();
  EXPECT_THROW_MSG(flow::serving::Server{options}, "cannot listen for HTTP on 127.0.0.1:" +
                                                       std::to_string(first->metrics_port()));
  options.metrics_port = -1;
  options.http_port = first->http_port();
  EXPECT_THROW_MSG(flow::serving::Server{options}, "cannot listen for HTTP on 127.0.0.1:" +
                                                       std::to_string(first->http_port()));
}

}  // namespace

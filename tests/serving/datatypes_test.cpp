// Every KServe datatype but BYTES, through an identity-like model, in raw and in typed contents
// (FP16 and BF16 travel raw only).
#include "serving_test_util.h"

namespace st = serving_test;

namespace {

struct DatatypeCase {
  flow::DType dtype;
  std::string datatype;
  std::vector<double> values;  // six values, exactly representable in the datatype
};

std::vector<DatatypeCase> cases() {
  return {
      {flow::kBool, "BOOL", {1, 0, 0, 1, 1, 0}},
      {flow::kUInt8, "UINT8", {0, 1, 2, 127, 200, 255}},
      {flow::kUInt16, "UINT16", {0, 1, 255, 256, 40000, 65535}},
      {flow::kUInt32, "UINT32", {0, 1, 65536, 2147483648.0, 3000000000.0, 4294967295.0}},
      {flow::kUInt64, "UINT64", {0, 1, 4294967296.0, 1e15, 9007199254740992.0, 18446744073709549568.0}},
      {flow::kInt8, "INT8", {-128, -1, 0, 1, 7, 127}},
      {flow::kInt16, "INT16", {-32768, -1, 0, 1, 300, 32767}},
      {flow::kInt32, "INT32", {-2147483648.0, -5, 0, 5, 65536, 2147483647}},
      {flow::kInt64, "INT64", {-9007199254740992.0, -3, 0, 3, 1e12, 9007199254740992.0}},
      {flow::kFloat16, "FP16", {-2.5, -0.125, 0, 1, 1024, 65504}},
      {flow::kBFloat16, "BF16", {-2.5, -0.5, 0, 1, 256, 65536}},
      {flow::kFloat32, "FP32", {-0.375, -2.5, 0, 1, 3.25, 16777216}},
      {flow::kFloat64, "FP64", {-0.1, -2.5, 0, 1, 3.141592653589793, 1.0e300}},
  };
}

std::string model_name(const std::string& datatype) { return "identity_" + datatype; }

// The typed contents field for the datatype, filled with values; false when it has none.
bool fill_typed(const std::string& datatype, const std::vector<double>& values, inference::InferTensorContents& contents) {
  for (double v : values) {
    if (datatype == "BOOL") contents.add_bool_contents(v != 0);
    else if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32")
      contents.add_uint_contents(static_cast<uint32_t>(v));
    else if (datatype == "UINT64") contents.add_uint64_contents(static_cast<uint64_t>(v));
    else if (datatype == "INT8" || datatype == "INT16" || datatype == "INT32")
      contents.add_int_contents(static_cast<int32_t>(v));
    else if (datatype == "INT64") contents.add_int64_contents(static_cast<int64_t>(v));
    else if (datatype == "FP32") contents.add_fp32_contents(static_cast<float>(v));
    else if (datatype == "FP64") contents.add_fp64_contents(v);
    else return false;
  }
  return true;
}

class DatatypesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& c : cases()) {
      st::export_identity(repo_.version_dir(model_name(c.datatype), 1), c.dtype);
    }
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }
  inference::ModelInferRequest request_for(const DatatypeCase& c) const {
    inference::ModelInferRequest request;
    request.set_model_name(model_name(c.datatype));
    auto* input = request.add_inputs();
    input->set_name("x");
    input->set_datatype(c.datatype);
    input->add_shape(2);
    input->add_shape(3);
    return request;
  }
  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
};

TEST_F(DatatypesTest, MetadataNamesEveryDatatype) {
  for (const auto& c : cases()) {
    const auto metadata = client_->model_metadata(model_name(c.datatype));
    EXPECT_EQ(metadata.inputs(0).datatype(), c.datatype);
    EXPECT_EQ(metadata.outputs(0).datatype(), c.datatype);
  }
}

TEST_F(DatatypesTest, RawContentsRoundTripEveryDatatype) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.datatype);
    inference::ModelInferRequest request = request_for(c);
    const std::string bytes = flow::serving::encode_values(c.datatype, c.values);
    request.add_raw_input_contents(bytes);
    inference::ModelInferResponse response;
    const grpc::Status status = client_->infer(request, response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).datatype(), c.datatype);
    EXPECT_EQ(response.raw_output_contents(0), bytes);
    EXPECT_EQ(flow::serving::decode_values(c.datatype, response.raw_output_contents(0)), c.values);
  }
}

// Raw BOOL bytes other than 0 and 1 are not booleans (reading one as bool is undefined
// behaviour): the request is refused before it reaches the model (found by fuzz_infer_request).
TEST_F(DatatypesTest, RawBoolBytesMustBeZeroOrOne) {
  const DatatypeCase c = cases().front();
  ASSERT_EQ(c.datatype, "BOOL");
  inference::ModelInferRequest request = request_for(c);
  request.add_raw_input_contents(std::string("\x01\x00\x03\x01\x00\x00", 6));
  inference::ModelInferResponse response;
  const grpc::Status status = client_->infer(request, response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("BOOL data holds the byte 3"), std::string::npos) << status.error_message();
}

TEST_F(DatatypesTest, TypedContentsRoundTripEveryDatatypeWithATypedField) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.datatype);
    inference::ModelInferRequest request = request_for(c);
    const bool typed = fill_typed(c.datatype, c.values, *request.mutable_inputs(0)->mutable_contents());
    inference::ModelInferResponse response;
    const grpc::Status status = client_->infer(request, response);
    if (!typed) {  // FP16, BF16: only raw
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_NE(status.error_message().find("raw_input_contents"), std::string::npos) << status.error_message();
      continue;
    }
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(flow::serving::decode_values(c.datatype, response.raw_output_contents(0)), c.values);
  }
}

}  // namespace

// The REST request reader: inputs' data arrays become compact leaves (whatever their nesting),
// the rest of the request a DOM; a data field given twice is refused; a request costs a small
// multiple of its size in memory.
#include <gtest/gtest.h>
#include <malloc.h>

#include "serving/rest_json.h"

namespace {

using flow::serving::JsonData;
using flow::serving::parse_request_json;
using Kind = JsonData::Kind;

TEST(RestJsonTest, DataArraysBecomeCompactLeavesInRowMajorOrder) {
  const auto request = parse_request_json(R"({"id": "r", "inputs": [
      {"name": "a", "shape": [2, 3], "data": [[1, -2, 3.5], [18446744073709551615, true, null]]},
      {"name": "b", "data": ["s", {"x": [1, 2]}, [[[7]]]]}],
    "outputs": [{"name": "y", "data": [1, 2]}]})");
  ASSERT_EQ(request.data.size(), 2u);
  const JsonData& a = request.data.at(0);
  EXPECT_EQ(a.depth, 2u);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a.kinds, (std::vector<Kind>{Kind::kUnsigned, Kind::kInteger, Kind::kFloat, Kind::kUnsigned, Kind::kBool, Kind::kNull}));
  EXPECT_EQ(a.integer(1), -2);
  EXPECT_EQ(a.floating(2), 3.5);
  EXPECT_EQ(a.unsigned_integer(3), 18446744073709551615ull);
  EXPECT_EQ(a.describe(2), "3.5");
  EXPECT_EQ(a.describe(4), "a JSON boolean");
  const JsonData& b = request.data.at(1);
  EXPECT_EQ(b.depth, 4u);
  EXPECT_EQ(b.kinds, (std::vector<Kind>{Kind::kString, Kind::kObject, Kind::kUnsigned}));
  EXPECT_EQ(b.integer(2), 7);
  // The rest is a DOM, with a null where each data array was; data elsewhere stays a DOM.
  EXPECT_EQ(request.header["id"], "r");
  EXPECT_EQ(request.header["inputs"][0]["shape"], nlohmann::json({2, 3}));
  EXPECT_TRUE(request.header["inputs"][0]["data"].is_null());
  EXPECT_EQ(request.header["outputs"][0]["data"], nlohmann::json({1, 2}));
}

TEST(RestJsonTest, OnlyArraysInTheTopLevelInputsAreCompacted) {
  const auto scalar = parse_request_json(R"({"inputs": [{"name": "a", "data": 5}], "data": [1]})");
  EXPECT_TRUE(scalar.data.empty());
  EXPECT_EQ(scalar.header["inputs"][0]["data"], 5);
  EXPECT_EQ(scalar.header["data"], nlohmann::json({1}));
  const auto nested = parse_request_json(R"({"x": {"inputs": [{"data": [1]}]}})");
  EXPECT_TRUE(nested.data.empty());
  const auto root_array = parse_request_json(R"([{"inputs": [{"data": [1]}]}])");
  EXPECT_TRUE(root_array.data.empty());
  // The second input's data is indexed as the second input, whatever came before it.
  const auto second = parse_request_json(R"({"inputs": [{"name": "a"}, {"name": "b", "data": [[1], [2]]}]})");
  ASSERT_EQ(second.data.count(1), 1u);
  EXPECT_EQ(second.data.at(1).size(), 2u);
}

// A repeated "inputs" key: the DOM keeps the last array, and the data read is that array's only
// (fuzz/regressions/rest_request/repeated_inputs_key-reads_discarded_data.json).
TEST(RestJsonTest, ARepeatedInputsKeyKeepsOnlyTheLastArraysData) {
  const auto request = parse_request_json(R"({"inputs": [{"name": "a", "data": [1, 2]}], "inputs": [{"name": "b"}]})");
  EXPECT_EQ(request.header["inputs"], nlohmann::json::parse(R"([{"name": "b"}])"));
  EXPECT_TRUE(request.data.empty());
  const auto later = parse_request_json(R"({"inputs": [{"name": "a"}], "inputs": [{"name": "b", "data": [7]}]})");
  ASSERT_EQ(later.data.count(0), 1u);
  EXPECT_EQ(later.data.at(0).integer(0), 7);
}

TEST(RestJsonTest, TwoDataFieldsInOneInputAreRefused) {
  EXPECT_THROW(parse_request_json(R"({"inputs": [{"data": [1], "data": [2]}]})"), std::invalid_argument);
  EXPECT_THROW(parse_request_json(R"({"inputs": [{"data": [1], "data": 2}]})"), std::invalid_argument);
  EXPECT_THROW(parse_request_json(R"({"inputs": [{"data": 1, "data": [2]}]})"), std::invalid_argument);
}

TEST(RestJsonTest, TextThatIsNotJsonIsAParseError) {
  EXPECT_THROW(parse_request_json(R"({"inputs": [{"data": [1, 2)"), nlohmann::json::parse_error);
  EXPECT_THROW(parse_request_json(""), nlohmann::json::parse_error);
  EXPECT_THROW(parse_request_json("{} {}"), nlohmann::json::parse_error);
}

// Two bytes of JSON a value ("0,") at 9 bytes a leaf: the reader holds under 5 bytes per byte of
// text (a DOM would hold 16-32 bytes a value: 8-16x).
TEST(RestJsonTest, ARequestCostsASmallMultipleOfItsSize) {
  constexpr size_t kValues = 4 << 20;
  std::string text = R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4194304], "data": [)";
  text.reserve(text.size() + 2 * kValues + 8);
  for (size_t i = 0; i < kValues; ++i) text += i ? ",0" : "0";
  text += "]}]}";
  const size_t before = mallinfo2().uordblks;
  if (before == 0) GTEST_SKIP() << "mallinfo2 does not count this allocator's blocks (a sanitizer's)";
  const auto request = parse_request_json(text);
  const size_t held = mallinfo2().uordblks - before;
  EXPECT_EQ(request.data.at(0).size(), kValues);
  EXPECT_LT(held, 5 * text.size()) << held << " bytes held for " << text.size() << " bytes of JSON";
}

}  // namespace

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::StateDict;
using flow::Tensor;

namespace {
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with the given JSON header and data bytes, laid out as safetensors does.
std::string safetensors(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + data;
}
}  // namespace

TEST(Serialization, RoundTripsEveryDTypeAndIsByteStable) {
  flow::manual_seed(14);
  StateDict state;
  for (flow::DType dtype : flow::all_dtypes()) state.insert("t_" + flow::dtype_name(dtype), flow::randn({2, 3}).to(dtype));
  state.insert("scalar", flow::full({}, 3.5));
  state.insert("empty", flow::zeros({0, 4}));
  state.insert("strided", flow::arange(12, flow::kFloat64).reshape({3, 4}).t());
  state.metadata()["step"] = "42";
  const std::string path = unique_temp_path("roundtrip.safetensors");
  flow::save(state, path);
  StateDict loaded = flow::load(path);
  ASSERT_EQ(loaded.keys(), state.keys());
  for (const auto& [name, t] : state) {
    EXPECT_EQ(loaded.at(name).dtype(), t.dtype()) << name;
    EXPECT_EQ(loaded.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(flow::testing::values(loaded.at(name)), flow::testing::values(t)) << name;
  }
  EXPECT_EQ(loaded.metadata().at("step"), "42");
  const std::string again = unique_temp_path("roundtrip2.safetensors");
  flow::save(loaded, again);
  EXPECT_EQ(read_bytes(path), read_bytes(again));
}

TEST(Serialization, LayoutFollowsTheSafetensorsSpec) {
  StateDict state;
  state.insert("a", flow::tensor<float>({1.0f, 2.0f}));
  state.insert("b", flow::tensor<int64_t>({7}));
  const std::string path = unique_temp_path("layout.safetensors");
  flow::save(state, path);
  float floats[2] = {1.0f, 2.0f};
  int64_t seven = 7;
  std::string data(reinterpret_cast<const char*>(floats), 8);
  data += std::string(reinterpret_cast<const char*>(&seven), 8);
  const std::string expected = safetensors(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})", data);
  EXPECT_EQ(read_bytes(path), expected);
}

TEST(Serialization, StateDictKeepsOrderAndReplacesInPlace) {
  StateDict state;
  state.insert("z", flow::zeros({1}));
  state.insert("a", flow::zeros({1}));
  state.insert("z", flow::ones({2}));
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"z", "a"}));
  EXPECT_EQ(state.at("z").numel(), 2);
  state.erase("z");
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"a"}));
  EXPECT_THROW_MSG(state.at("missing"), "[state_dict] no entry named 'missing'");
}

TEST(Serialization, CorruptFilesAreReportedNotCrashed) {
  const std::string path = unique_temp_path("corrupt.safetensors");
  const std::string good_entry = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", "too short for a safetensors header"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x00", 8), "exceeds the"},
      {std::string("\x10\x00\x00\x00\x00\x00\x00\x00{}", 10), "runs past the end"},
      {safetensors("{not json", ""), "header is not valid JSON"},
      {safetensors("[1,2]", ""), "header is not a JSON object"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[2]}})", eight), "needs dtype, shape and data_offsets"},
      {safetensors(R"({"x":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", eight), "unknown dtype \"F99\""},
      {safetensors(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight), "invalid dimension -2"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight), "are reversed"},
      {safetensors(good_entry, "1234"), "is past the 4-byte data area"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight), "needs 12"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "starts at 4 but the previous tensor ends at 0"},
      {safetensors(good_entry, eight + "xx"), "2 trailing bytes"},
      {safetensors(R"({"__metadata__":{"k":1}})", ""), "value of 'k' is not a string"},
  };
  for (const auto& [bytes, message] : cases) {
    write_bytes(path, bytes);
    EXPECT_THROW_MSG(flow::load(path), message);
  }
  EXPECT_THROW_MSG(flow::load(unique_temp_path("does_not_exist")), "does_not_exist: cannot open file");
}

TEST(Serialization, RejectsWhatTheFormatForbids) {
  const std::string four(4, '\0'), eight(8, '\0');
  const std::vector<std::pair<std::string, std::string>> cases = {
      // A repeated name: the JSON parser keeps one value, so one tensor would silently vanish.
      {safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "names the key 'x' twice"},
      {safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "names the key 'a' twice"},
      {safetensors(R"({"x":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", four), "names the key 'dtype' twice"},
      {safetensors(R"({"__metadata__":{"k":"1","k":"2"}})", ""), "names the key 'k' twice"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", four), "invalid dimension"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", four),
       "has more bytes than int64 can count"},
      // An empty tensor still gets strides: the other dims must not overflow either.
      {safetensors(R"({"x":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", ""),
       "has more bytes than int64 can count"},
      {safetensors(R"({"x":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight), "invalid dimension 2.0"},
      {safetensors(R"({"x":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", eight), "unknown dtype \"f32\""},
      {safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "overlap those of tensor 'a'"},
      {safetensors(R"({"x":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)),
       "holds the byte 2"},
  };
  for (const auto& [bytes, message] : cases) {
    SCOPED_TRACE(message);
    EXPECT_THROW_MSG(flow::load_bytes(bytes, "in memory"), message);
  }
  EXPECT_THROW_MSG(flow::load_bytes("abc", "in memory"), "[load] in memory: file is 3 bytes");
  EXPECT_THROW_MSG(flow::load(::testing::TempDir()), "not a regular file");
}

TEST(Serialization, TensorsMayBeStoredInAnyOrder) {
  // Other writers (Python's safetensors) order the data by dtype alignment, not like the header.
  float floats[2] = {1.5f, -2.0f};
  int32_t three = 3;
  std::string data(reinterpret_cast<const char*>(&three), 4);
  data += std::string(reinterpret_cast<const char*>(floats), 8);
  const StateDict state = flow::load_bytes(
      safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"n":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                  R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]}})", data),
      "in memory");
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"w", "n", "e"}));
  EXPECT_EQ(state.at("w").tolist<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(state.at("n").item<int32_t>(), 3);
  EXPECT_EQ(state.at("e").numel(), 0);
}

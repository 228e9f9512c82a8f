// The storage-only dtypes (int16, uint16, uint32, uint64): names, sizes, promotion, casts both
// ways, clone and safetensors round trips. They have no arithmetic kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "common/scratch_dir.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/serialization.h"

using flow::DType;

namespace {

const std::vector<DType> kStorageOnly = {flow::kInt16, flow::kUInt16, flow::kUInt32, flow::kUInt64};

TEST(StorageDType, NamesSizesAndSets) {
  EXPECT_EQ(flow::itemsize(flow::kInt16), 2u);
  EXPECT_EQ(flow::itemsize(flow::kUInt16), 2u);
  EXPECT_EQ(flow::itemsize(flow::kUInt32), 4u);
  EXPECT_EQ(flow::itemsize(flow::kUInt64), 8u);
  for (DType dtype : kStorageOnly) {
    EXPECT_EQ(flow::dtype_from_name(flow::dtype_name(dtype)), dtype);
    EXPECT_TRUE(flow::is_integral(dtype));
    EXPECT_FALSE(flow::is_floating(dtype));
    const auto all = flow::all_dtypes(), storage = flow::storage_dtypes();
    EXPECT_EQ(std::count(all.begin(), all.end(), dtype), 0);
    EXPECT_EQ(std::count(storage.begin(), storage.end(), dtype), 1);
  }
  EXPECT_EQ(flow::dtype_name(flow::kUInt64), "uint64");
}

TEST(StorageDType, PromotionByWidthThenSignedness) {
  EXPECT_EQ(flow::promote_types(flow::kInt16, flow::kInt8), flow::kInt16);
  EXPECT_EQ(flow::promote_types(flow::kUInt16, flow::kInt32), flow::kInt32);
  EXPECT_EQ(flow::promote_types(flow::kUInt32, flow::kInt32), flow::kUInt32);
  EXPECT_EQ(flow::promote_types(flow::kUInt64, flow::kInt64), flow::kUInt64);
  EXPECT_EQ(flow::promote_types(flow::kUInt64, flow::kFloat16), flow::kFloat16);
  // Unchanged for the arithmetic dtypes.
  EXPECT_EQ(flow::promote_types(flow::kUInt8, flow::kInt8), flow::kInt32);
  EXPECT_EQ(flow::promote_types(flow::kInt64, flow::kInt32), flow::kInt64);
}

TEST(StorageDType, CastsCloneAndExtremes) {
  const auto source = flow::tensor<double>({0, 1, 7, 65535});
  for (DType dtype : {flow::kUInt16, flow::kUInt32, flow::kUInt64}) {
    const auto cast = source.to(dtype);
    EXPECT_EQ(cast.dtype(), dtype);
    EXPECT_EQ(cast.clone().to(flow::kFloat64).tolist<double>(), (std::vector<double>{0, 1, 7, 65535}));
  }
  EXPECT_EQ(flow::tensor<double>({-32768, -1, 0, 32767}).to(flow::kInt16).tolist<int16_t>(),
            (std::vector<int16_t>{-32768, -1, 0, 32767}));
  const uint64_t big = std::numeric_limits<uint64_t>::max();
  auto u64 = flow::make_tensor({2}, flow::kUInt64, flow::kCPU);
  u64.data_ptr<uint64_t>()[0] = big;
  u64.data_ptr<uint64_t>()[1] = 3;
  EXPECT_EQ(u64.clone().tolist<uint64_t>(), (std::vector<uint64_t>{big, 3}));
  EXPECT_EQ(u64.to(flow::kUInt32).tolist<uint32_t>()[1], 3u);
}

TEST(StorageDType, SafetensorsRoundTrip) {
  const flow::testing::ScratchDir scratch;
  const auto path = (scratch / "state.safetensors").string();
  flow::StateDict state;
  for (DType dtype : kStorageOnly) state.insert(flow::dtype_name(dtype), flow::tensor<double>({1, 2, 3}).to(dtype));
  flow::save(state, path);
  const flow::StateDict loaded = flow::load(path);
  for (DType dtype : kStorageOnly) {
    const auto& t = loaded.at(flow::dtype_name(dtype));
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.to(flow::kInt64).tolist<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  }
}

}  // namespace

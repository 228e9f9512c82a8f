#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "common/test_util.h"
#include "core/flow.h"

using flow::DType;

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(flow::itemsize(flow::kFloat16), 2u);
  EXPECT_EQ(flow::itemsize(flow::kInt64), 8u);
  EXPECT_EQ(flow::dtype_name(flow::kBFloat16), "bfloat16");
  EXPECT_EQ(flow::dtype_from_name("uint8"), flow::kUInt8);
  std::ostringstream out;
  out << flow::kFloat32;
  EXPECT_EQ(out.str(), "flow.float32");
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(flow::promote_types(flow::kInt32, flow::kFloat32), flow::kFloat32);
  EXPECT_EQ(flow::promote_types(flow::kInt64, flow::kInt32), flow::kInt64);
  EXPECT_EQ(flow::promote_types(flow::kBool, flow::kUInt8), flow::kUInt8);
  EXPECT_EQ(flow::promote_types(flow::kUInt8, flow::kInt8), flow::kInt32);
  EXPECT_EQ(flow::promote_types(flow::kFloat16, flow::kBFloat16), flow::kFloat32);
  EXPECT_EQ(flow::promote_types(flow::kFloat16, flow::kFloat64), flow::kFloat64);
  EXPECT_EQ(flow::promote_types(flow::kInt64, flow::kFloat16), flow::kFloat16);
}

TEST(Cast, BetweenAllDTypes) {
  auto source = flow::tensor<double>({-2.75, 0.0, 1.5, 3.0});
  for (DType dtype : flow::all_dtypes()) {
    auto cast = source.to(dtype);
    EXPECT_EQ(cast.dtype(), dtype);
    auto back = cast.to(flow::kFloat64).tolist<double>();
    if (dtype == flow::kBool) {
      EXPECT_EQ(back, (std::vector<double>{1, 0, 1, 1}));
    } else if (dtype == flow::kUInt8) {
      EXPECT_EQ(back[1], 0);
      EXPECT_EQ(back[3], 3);
    } else if (flow::is_integral(dtype)) {
      EXPECT_EQ(back, (std::vector<double>{-2, 0, 1, 3})) << flow::dtype_name(dtype);
    } else {
      EXPECT_EQ(back, (std::vector<double>{-2.75, 0, 1.5, 3})) << flow::dtype_name(dtype);
    }
  }
}

TEST(Cast, NonContiguousSourceAndSameDTypeIsIdentity) {
  auto a = flow::arange(6, flow::kFloat32).reshape({2, 3}).t();
  auto c = a.to(flow::kInt32);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.tolist<int32_t>(), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(a.to(flow::kFloat32).same(a));
  EXPECT_TRUE(a.to(flow::kCPU).same(a));
}

TEST(Cast, CopyInPlaceBroadcastsAndBumpsVersion) {
  auto dst = flow::zeros({2, 3});
  const auto version = dst.storage()->version();
  dst.copy_(flow::arange(3));
  EXPECT_EQ(dst.tolist<float>(), (std::vector<float>{0, 1, 2, 0, 1, 2}));
  EXPECT_GT(dst.storage()->version(), version);
  dst.t().select(0, 1).fill_(9);  // writes through a strided view
  EXPECT_EQ(dst.tolist<float>(), (std::vector<float>{0, 9, 2, 0, 9, 2}));
  EXPECT_THROW_MSG(dst.copy_(flow::zeros({4})), "[copy_] shapes (2,3) and (4,) cannot be broadcast together");
}

// Gradient bucketing shared by DDP and the Graph: which tensors share a collective, and the flat
// buffer they travel in.
#include <gtest/gtest.h>

#include "core/flow.h"
#include "core/global/buckets.h"

namespace {

using flow::distributed::BucketCaps;
using flow::distributed::BucketEntry;
using flow::distributed::FlatLayout;
using flow::distributed::plan_buckets;
using Buckets = std::vector<std::vector<size_t>>;

TEST(PlanBuckets, UncappedPutsEachKeyInOneBucketInTheOrderKeysFirstAppear) {
  const std::vector<BucketEntry> entries{{"f32", 4}, {"bf16", 2}, {"f32", 8}, {"bf16", 2}, {"f64", 8}};
  EXPECT_EQ(plan_buckets(entries, BucketCaps{}), (Buckets{{0, 2}, {1, 3}, {4}}));
}

TEST(PlanBuckets, CapsCloseABucketAndTheFirstBucketHasItsOwnCap) {
  const std::vector<BucketEntry> entries{{"a", 10}, {"a", 10}, {"a", 10}, {"a", 10}, {"a", 10}, {"a", 10}};
  // First bucket up to 10 bytes, the others up to 25.
  EXPECT_EQ(plan_buckets(entries, BucketCaps{10, 25}), (Buckets{{0}, {1, 2}, {3, 4}, {5}}));
}

TEST(PlanBuckets, AnEntryLargerThanTheCapGetsABucketOfItsOwn) {
  const std::vector<BucketEntry> entries{{"a", 1}, {"a", 100}, {"a", 1}};
  EXPECT_EQ(plan_buckets(entries, BucketCaps{10, 10}), (Buckets{{0}, {1}, {2}}));
}

TEST(PlanBuckets, KeysFillTheirOwnOpenBucketsUnderTheCap) {
  const std::vector<BucketEntry> entries{{"a", 6}, {"b", 6}, {"a", 6}, {"b", 6}, {"a", 6}};
  EXPECT_EQ(plan_buckets(entries, BucketCaps{12, 12}), (Buckets{{0, 2}, {1, 3}, {4}}));
  EXPECT_TRUE(plan_buckets({}, BucketCaps{}).empty());
}

TEST(FlatLayout, PackLaysTensorsEndToEndAndSlotViewsThemBack) {
  const flow::Tensor a = flow::arange(0.0, 6.0).reshape({2, 3});
  const flow::Tensor b = flow::arange(10.0, 14.0);
  const flow::Tensor c = flow::tensor(std::vector<float>{7.5f}, flow::Shape{});
  const FlatLayout layout({a, b, c});
  EXPECT_EQ(layout.total(), 11);
  const flow::Tensor flat = FlatLayout::pack({a, b, c});
  ASSERT_EQ(flat.shape(), flow::Shape{11});
  const flow::TensorList originals{a, b, c};
  for (size_t i = 0; i < originals.size(); ++i) {
    EXPECT_EQ(layout.slot(flat, i).shape(), originals[i].shape());
    EXPECT_TRUE(flow::allclose(layout.slot(flat, i), originals[i], 0, 0));
  }
  // A slot is a view: writing it writes the flat buffer.
  layout.slot(flat, 1).zero_();
  EXPECT_EQ(flat.sum().item<float>(), 15.0f + 7.5f);
}

}  // namespace

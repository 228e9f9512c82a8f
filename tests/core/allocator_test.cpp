// flow's CPU allocator keeps freed blocks of 128 KiB and more for reuse (core/allocator.cpp), so
// that a training step's or a run's tensors land on pages already touched: each first touch of a
// fresh page is a page fault.
#include <gtest/gtest.h>

#include "core/flow.h"

namespace {

TEST(CpuAllocator, ATensorOfAFreedSizeGetsItsBlockBack) {
  // 160 KiB and 800 KiB (64 KiB size steps), 4 MiB (1 MiB steps).
  for (int64_t floats : {int64_t{40} << 10, int64_t{200} << 10, int64_t{1} << 20}) {
    const void* freed = nullptr;
    {
      const flow::Tensor first = flow::empty({floats});
      freed = first.data_ptr();
    }
    const flow::Tensor again = flow::empty({floats});
    EXPECT_EQ(again.data_ptr(), freed) << floats << " floats";
  }
}

TEST(CpuAllocator, NearSizesShareABlock) {
  const void* freed = nullptr;
  {
    const flow::Tensor first = flow::empty({int64_t{300} << 10}, flow::kUInt8);
    freed = first.data_ptr();
  }
  // 300 KiB and 310 KiB both round to 320 KiB.
  const flow::Tensor near = flow::empty({int64_t{310} << 10}, flow::kUInt8);
  EXPECT_EQ(near.data_ptr(), freed);
}

}  // namespace

#pragma once
// Fixture for tests that run as every rank of a job (flow_distributed_tests --ranks=N): each
// test initialises the process group from the launcher's environment and destroys it after.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/multiprocess.h"
#include "core/tensor.h"
#include "distributed/distributed.h"

namespace flow::distributed::testing {

class RankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!flow::testing::in_rank_process()) GTEST_SKIP() << "runs as ranks of a job: flow_distributed_tests --ranks=N";
    init_process_group(InitOptions().set_timeout(timeout()));
    rank = get_rank();
    world = get_world_size();
  }
  void TearDown() override {
    // No rank tears its group down (and starts the next test's rendezvous on the same port)
    // before every rank has finished this test: a rank that skips a test early would otherwise
    // meet a slower peer still inside this test's rendezvous.
    if (flow::testing::in_rank_process()) {
      try {
        barrier();
      } catch (const Error&) {
        // The test broke the group (a fault test, or a failure): it has reported that already.
      }
    }
    destroy_process_group();
  }
  // Long enough for a loaded CI machine; the fault tests shorten it.
  virtual std::chrono::milliseconds timeout() const { return std::chrono::seconds(20); }

  ProcessGroup& group() { return process_group("test"); }

  int64_t rank = 0;
  int64_t world = 1;
};

// bool elements are stored as bytes (std::vector<bool> has no contiguous data).
template <typename T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <typename T>
Tensor make_filled(const Shape& shape, const std::vector<T>& values) {
  Tensor tensor = make_tensor(shape, DTypeOf<T>::value, kCPU);
  EXPECT_EQ(static_cast<size_t>(tensor.numel()), values.size());
  auto* data = static_cast<Stored<T>*>(tensor.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) data[i] = static_cast<Stored<T>>(values[i]);
  return tensor;
}

template <typename T>
std::vector<T> contents(const Tensor& tensor) {
  const auto* data = static_cast<const Stored<T>*>(tensor.data_ptr());
  return std::vector<T>(data, data + tensor.numel());
}

}  // namespace flow::distributed::testing

#include <glog/logging.h>
#include <gtest/gtest.h>

#include "common/multiprocess.h"

// `flow_distributed_tests --ranks=N [gtest flags]` runs the tests as N ranks of one job; without
// --ranks the multi-process suites skip themselves.
int main(int argc, char** argv) {
  if (std::optional<int> job = flow::testing::launch_if_asked(argc, argv)) return *job;
  google::InitGoogleLogging(argv[0]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

#pragma once
// The protobuf targets: protobuf logs every parse error it meets, which would drown the fuzzer's
// output and slow it down. The errors themselves still reach the code under test.
#include <google/protobuf/stubs/logging.h>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

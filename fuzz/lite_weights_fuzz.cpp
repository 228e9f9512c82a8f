// oneflow_lite's Model::load of a fuzzed weights.safetensors beside the real model.pb
// (fuzz/lite_fuzz.h).
#include "lite_fuzz.h"
#include "quiet_protobuf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return flow_fuzz::load_and_run_export("weights.safetensors", data, size);
}

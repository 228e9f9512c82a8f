// data::CIFAR10 on any test_batch.bin. A flow::Error is a rejection. An accepted file is a whole
// number of 3073-byte records with labels 0..9, and every item reads.
#include <cstdint>
#include <string_view>

#include "data/vision.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto root = flow_fuzz::scratch_dir() / "cifar";
  flow_fuzz::fs::create_directories(root);
  flow_fuzz::write_file(root / "test_batch.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    flow::data::CIFAR10 dataset(root.string(), /*train=*/false);
    const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (!gzip && static_cast<size_t>(dataset.size()) * 3073 != size) flow_fuzz::invalid_accepted("CIFAR record count differs from the data");
    for (int64_t i = 0; i < dataset.size(); ++i) {
      const flow::data::Example example = dataset.get(i);
      if (example.data.shape() != flow::Shape{3, 32, 32}) flow_fuzz::invalid_accepted("a CIFAR image is not (3,32,32)");
      const int64_t label = example.target.item<int64_t>();
      if (label < 0 || label > 9) flow_fuzz::invalid_accepted("a CIFAR label outside 0..9");
    }
  } catch (const flow::Error&) {
  }
  return 0;
}

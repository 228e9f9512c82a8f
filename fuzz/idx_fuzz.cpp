// data::read_idx (MNIST's IDX reader, gzip or raw) on any file, as images (3 dims) and as labels
// (1 dim). A flow::Error is a rejection. An accepted raw file holds exactly the header's element
// count after the header.
#include <cstdint>
#include <string_view>

#include "data/vision.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto path = flow_fuzz::scratch_dir() / "input-idx-ubyte";
  flow_fuzz::write_file(path, bytes);
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  for (int dims : {1, 3}) {
    flow::Tensor contents;
    try {
      contents = flow::data::read_idx(path.string(), dims, "IDX");
    } catch (const flow::Error&) {
      continue;
    }
    if (contents.dtype() != flow::kUInt8 || contents.dim() != dims) flow_fuzz::invalid_accepted("IDX contents of the wrong dtype or rank");
    const auto header = static_cast<size_t>(4 + 4 * dims);
    if (!gzip && static_cast<size_t>(contents.numel()) != size - header) flow_fuzz::invalid_accepted("IDX element count differs from the data");
    if (dims == 3 && contents.size(0) > 0) (void)flow::data::to_tensor(contents.select(0, 0));
  }
  return 0;
}

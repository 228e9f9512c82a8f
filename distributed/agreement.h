#pragma once
// What members exchange before a collective so that a mismatch (another collective, dtype,
// element count, sizes, root) is a clear error instead of corrupt data or a hang.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/comm/process_group.h"
#include "core/dtype.h"

namespace flow::distributed {

enum class Collective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kBarrier, kSend, kRecv };
const char* collective_name(Collective collective);

// Fixed size and trivially copyable: sent as raw bytes between ranks of one build.
struct CollectiveHeader {
  Collective collective = Collective::kBarrier;
  DType dtype = kUInt8;
  ReduceOp reduce = ReduceOp::kSum;
  uint8_t has_reduce = 0;
  uint32_t unused = 0;
  int64_t root = -1;          // global rank; -1 when the collective has none
  int64_t numel = 0;          // elements every member must agree on
  int64_t row_elements = 0;   // elements per dim-0 row, for collectives with dim0 sizes
  uint64_t sizes_digest = 0;  // digest of the dim0 sizes every member must pass alike
};
static_assert(std::is_trivially_copyable_v<CollectiveHeader> && sizeof(CollectiveHeader) == 40);

uint64_t sizes_digest(const std::vector<int64_t>& sizes);

// Empty when the peer's header matches this rank's; otherwise what differs, e.g.
// "peer rank 0 sends float32 with 6 elements, this rank has float64 with 6 elements".
std::string describe_disagreement(const CollectiveHeader& peer, int64_t peer_rank, const CollectiveHeader& mine);

}  // namespace flow::distributed

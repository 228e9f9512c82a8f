#include "distributed/agreement.h"

#include "core/error.h"

namespace flow::distributed {

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBarrier: return "barrier";
    case Collective::kSend: return "send";
    case Collective::kRecv: return "recv";
  }
  return "?";
}

uint64_t sizes_digest(const std::vector<int64_t>& sizes) {
  // FNV-1a over the sizes: equal lists give equal digests; a collision only weakens the check.
  uint64_t digest = 14695981039346656037ull;
  for (int64_t size : sizes) {
    for (int byte = 0; byte < 8; ++byte) {
      digest ^= static_cast<uint64_t>(size >> (8 * byte)) & 0xff;
      digest *= 1099511628211ull;
    }
  }
  return digest ^ sizes.size();
}

namespace {

bool point_to_point(Collective collective) { return collective == Collective::kSend || collective == Collective::kRecv; }

}  // namespace

std::string describe_disagreement(const CollectiveHeader& peer, int64_t peer_rank, const CollectiveHeader& mine) {
  std::string peer_name = detail::concat("peer rank ", peer_rank);
  bool pair_matches = point_to_point(peer.collective) && point_to_point(mine.collective) && peer.collective != mine.collective;
  if (peer.collective != mine.collective && !pair_matches) {
    return detail::concat(peer_name, " runs ", collective_name(peer.collective), ", this rank runs ",
                          collective_name(mine.collective), " (every member must call the same collectives in the same order)");
  }
  if (peer.dtype != mine.dtype || peer.numel != mine.numel) {
    return detail::concat(peer_name, " sends ", dtype_name(peer.dtype), " with ", peer.numel, " elements, this rank has ",
                          dtype_name(mine.dtype), " with ", mine.numel, " elements");
  }
  if (peer.has_reduce != mine.has_reduce || peer.reduce != mine.reduce) {
    return detail::concat(peer_name, " reduces with ", reduce_op_name(peer.reduce), ", this rank with ", reduce_op_name(mine.reduce));
  }
  if (peer.root != mine.root) {
    return detail::concat(peer_name, " uses root rank ", peer.root, ", this rank uses root rank ", mine.root);
  }
  if (peer.row_elements != mine.row_elements) {
    return detail::concat(peer_name, " has rows of ", peer.row_elements, " elements, this rank has rows of ",
                          mine.row_elements, " elements");
  }
  if (peer.sizes_digest != mine.sizes_digest) {
    return detail::concat(peer_name, " passes different dim0 sizes than this rank");
  }
  return {};
}

}  // namespace flow::distributed

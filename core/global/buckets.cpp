// Gradient bucketing: many tensors in one collective.
#include "core/global/buckets.h"

#include <algorithm>
#include <map>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/ops/comm.h"

namespace flow::distributed {
namespace {

// The placement every tensor of a bucket shares, each laid out as `layout` on it (a 1-D sbp). Its
// ranks are in increasing order, as boxing needs them: member i of a collective holds piece i.
const Placement& bucket_placement(const TensorList& bucket, const NdSbp& layout, const char* op) {
  const Placement& placement = bucket[0].placement();
  for (const Tensor& t : bucket) {
    if (!(t.placement() == placement) || !(t.sbp() == layout)) {
      fail(op, "bucketed tensors must have sbp ", nd_sbp_str(layout), " on one 1-D placement, got sbp ", nd_sbp_str(t.sbp()), " on ",
           t.placement().str());
    }
  }
  if (!std::is_sorted(placement.ranks().begin(), placement.ranks().end())) {
    fail(op, "bucketing needs the ranks of ", placement.str(), " in increasing order");
  }
  return placement;
}

Tensor local_piece(const Tensor& t) { return t.impl()->global->local; }

// How a bucket of tensors split by rows over a 1-D placement travels as one flat piece per member:
// member m sends its rows of tensor 0, then of tensor 1, ...: elements[m][i] elements of tensor i,
// starting at offsets[m][i] of its piece.
struct RowBucket {
  std::vector<std::vector<int64_t>> elements;  // [member][tensor]
  std::vector<std::vector<int64_t>> offsets;   // [member][tensor], within the member's piece
  std::vector<int64_t> piece_elements;         // per member

  RowBucket(const TensorList& tensors, const Placement& placement) {
    for (int64_t m = 0; m < placement.size(); ++m) {
      int64_t offset = 0;
      elements.emplace_back();
      offsets.emplace_back();
      for (const Tensor& t : tensors) {
        const int64_t count = local_shape(t.shape(), placement, NdSbp{sbp::split(0)}, m).numel();
        offsets.back().push_back(offset);
        elements.back().push_back(count);
        offset += count;
      }
      piece_elements.push_back(offset);
    }
  }
};

}  // namespace

std::vector<std::vector<size_t>> plan_buckets(const std::vector<BucketEntry>& entries, const BucketCaps& caps) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<double> bucket_bytes;
  std::map<std::string, size_t> open;  // key -> its open bucket
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto bytes = static_cast<double>(entries[i].bytes);
    const auto it = open.find(entries[i].key);
    if (it != open.end()) {
      const double cap = it->second == 0 ? caps.first_bytes : caps.bytes;
      if (bucket_bytes[it->second] + bytes <= cap) {
        buckets[it->second].push_back(i);
        bucket_bytes[it->second] += bytes;
        continue;
      }
    }
    open[entries[i].key] = buckets.size();
    buckets.push_back({i});
    bucket_bytes.push_back(bytes);
  }
  return buckets;
}

FlatLayout::FlatLayout(const TensorList& tensors) {
  for (const Tensor& t : tensors) {
    offsets_.push_back(total_);
    shapes_.push_back(t.shape());
    total_ += t.numel();
  }
}

Tensor FlatLayout::pack(const TensorList& tensors) {
  TensorList flat;
  for (const Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return cat(flat, 0);
}

Tensor FlatLayout::slot(const Tensor& flat, size_t i) const {
  return flat.narrow(0, offsets_[i], shapes_[i].numel()).view(shapes_[i]);
}

TensorList all_reduce_partial_sums(const TensorList& partials) {
  if (partials.empty()) return {};
  const NdSbp broadcast{Sbp::broadcast()};
  const Placement& placement = bucket_placement(partials, NdSbp{Sbp::partial_sum()}, "all_reduce");
  autograd::NoGradGuard no_grad;
  TensorList out(partials.size());
  if (placement.contains(get_rank())) {
    TensorList pieces;
    for (const Tensor& t : partials) pieces.push_back(local_piece(t));
    const FlatLayout layout(pieces);
    const Tensor reduced = all_reduce(FlatLayout::pack(pieces), ReduceOp::kSum, placement.ranks());
    for (size_t i = 0; i < partials.size(); ++i) out[i] = layout.slot(reduced, i);
  }
  TensorList results;
  for (size_t i = 0; i < partials.size(); ++i) {
    results.push_back(make_global({partials[i].shape(), partials[i].dtype(), partials[i].device()}, placement, broadcast, out[i]));
  }
  return results;
}

TensorList all_gather_row_splits(const TensorList& row_splits) {
  if (row_splits.empty()) return {};
  const Placement& placement = bucket_placement(row_splits, NdSbp{sbp::split(0)}, "all_gather");
  autograd::NoGradGuard no_grad;
  TensorList out(row_splits.size());
  if (placement.contains(get_rank())) {
    const RowBucket bucket(row_splits, placement);
    TensorList mine;
    for (const Tensor& t : row_splits) mine.push_back(local_piece(t));
    const Tensor gathered = all_gather(FlatLayout::pack(mine), bucket.piece_elements, placement.ranks());
    for (size_t i = 0; i < row_splits.size(); ++i) {
      TensorList parts;
      int64_t member_start = 0;
      for (size_t m = 0; m < bucket.piece_elements.size(); ++m) {
        parts.push_back(gathered.narrow(0, member_start + bucket.offsets[m][i], bucket.elements[m][i]));
        member_start += bucket.piece_elements[m];
      }
      out[i] = cat(parts, 0).reshape(row_splits[i].shape());
    }
  }
  TensorList results;
  for (size_t i = 0; i < row_splits.size(); ++i) {
    const Tensor& t = row_splits[i];
    results.push_back(make_global({t.shape(), t.dtype(), t.device()}, placement, NdSbp{Sbp::broadcast()}, out[i]));
  }
  return results;
}

TensorList reduce_scatter_partial_sums(const TensorList& partials) {
  if (partials.empty()) return {};
  const Placement& placement = bucket_placement(partials, NdSbp{Sbp::partial_sum()}, "reduce_scatter");
  const NdSbp rows{sbp::split(0)};
  autograd::NoGradGuard no_grad;
  TensorList out(partials.size());
  if (placement.contains(get_rank())) {
    const RowBucket bucket(partials, placement);
    // Member m's segment of the input holds the rows of every tensor that m keeps.
    TensorList segments;
    for (int64_t m = 0; m < placement.size(); ++m) {
      for (const Tensor& t : partials) {
        const Tensor& whole = local_piece(t);
        const int64_t count = whole.size(0);
        segments.push_back(whole.narrow(0, split_part_start(count, placement.size(), m), split_part_size(count, placement.size(), m)));
      }
    }
    const Tensor mine = reduce_scatter(FlatLayout::pack(segments), bucket.piece_elements, ReduceOp::kSum, placement.ranks());
    const int64_t me = placement.index_of(get_rank());
    const auto& my_offsets = bucket.offsets[static_cast<size_t>(me)];
    const auto& my_elements = bucket.elements[static_cast<size_t>(me)];
    for (size_t i = 0; i < partials.size(); ++i) {
      out[i] = mine.narrow(0, my_offsets[i], my_elements[i]).reshape(local_shape(partials[i].shape(), placement, rows, me));
    }
  }
  TensorList results;
  for (size_t i = 0; i < partials.size(); ++i) {
    const Tensor& t = partials[i];
    results.push_back(make_global({t.shape(), t.dtype(), t.device()}, placement, rows, out[i]));
  }
  return results;
}

}  // namespace flow::distributed

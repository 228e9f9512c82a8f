#pragma once
// Gradient bucketing, one unit for eager DDP (nn/parallel/ddp.cpp) and the Graph's data-parallel
// rewrite (graph/training/gradient_buckets.cpp): which tensors share one collective
// (plan_buckets), where each sits in the bucket's flat buffer (FlatLayout), and the bucketed
// collectives on global tensors.
#include <limits>
#include <string>
#include <vector>

#include "core/op.h"

namespace flow::distributed {

// One tensor to bucket: tensors of different keys (dtype, device, placement, collective) never
// share a bucket.
struct BucketEntry {
  std::string key;
  int64_t bytes = 0;
};

// The most bytes a bucket takes: the first bucket opened, and every other one. A bucket holds at
// least one tensor, whatever its size.
struct BucketCaps {
  double first_bytes = std::numeric_limits<double>::infinity();
  double bytes = std::numeric_limits<double>::infinity();
};

// Buckets of entries (indices into `entries`), in the order they opened: each entry joins the open
// bucket of its key, or opens a new one when it would pass the cap. Ranks passing the same
// entries get the same buckets, so their collectives match.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<BucketEntry>& entries, const BucketCaps& caps);

// Tensors laid end to end in one flat buffer, in order.
class FlatLayout {
 public:
  FlatLayout() = default;
  explicit FlatLayout(const TensorList& tensors);
  int64_t total() const { return total_; }
  // The tensors' elements in one new contiguous buffer.
  static Tensor pack(const TensorList& tensors);
  // Tensor i's elements in `flat`, as a view of tensor i's shape.
  Tensor slot(const Tensor& flat, size_t i) const;

 private:
  std::vector<int64_t> offsets_;
  std::vector<Shape> shapes_;
  int64_t total_ = 0;
};

// Partial sums made broadcast with one all_reduce for all of them: every tensor is global with
// sbp P on the same 1-D placement, and every rank of it calls this. Returns the tensors with sbp
// B, in order. Runs outside autograd.
TensorList all_reduce_partial_sums(const TensorList& partials);

// ZeRO's buckets, each one collective for many tensors on the same 1-D placement (called by every
// rank of it, outside autograd). all_gather_row_splits: tensors split by rows (S(0)) become
// broadcast (B): each member sends its rows of every tensor in one piece. reduce_scatter_partial_sums:
// partial sums (P) become split by rows (S(0)): each member keeps its rows of every sum.
TensorList all_gather_row_splits(const TensorList& row_splits);
TensorList reduce_scatter_partial_sums(const TensorList& partials);

}  // namespace flow::distributed

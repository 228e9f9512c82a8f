#pragma once
// Batch buckets: a dynamic-batch model whose every op treats the rows of dim 0 independently runs
// a batch of m rows on the program of a bucket size n >= m, its inputs padded with zero rows and
// its outputs cut back to m rows, so that the batch sizes clients send map to few programs (as
// ONNX Runtime's and TensorRT's optimization profiles do).
#include <cstdint>
#include <vector>

#include "core/op.h"

namespace flow::lite {

// The bucket of a batch of `rows`: up to 8 the size itself, above it the next size of the form
// 2^k or 3 * 2^(k-1) (12, 16, 24, 32, 48, ...), so that under a third of a bucket's rows are
// padding.
int64_t bucket_size(int64_t rows);

// One step of a program, by value ids.
struct RowStep {
  const OpDef* op = nullptr;
  const Attrs* attrs = nullptr;
  const std::vector<int>* inputs = nullptr;
  const std::vector<int>* outputs = nullptr;
  bool batch_in_attrs = false;  // an attribute holds the batch size (the export's batch slots)
};

// Whether row i of every output depends on row i of the inputs alone, decided from the ops' SBP
// signatures on the metas of a program at `batch` (>= 2): every value computed from the inputs
// must have `batch` rows and be split(0) by a signature of its op taking the op's other inputs
// (computed from weights alone) broadcast, and holding when split into single rows. An op
// without one (a reduction over the batch, a transpose of it, a source sized by the batch)
// makes the model's rows dependent.
bool rows_independent(const std::vector<RowStep>& steps, const std::vector<TensorMeta>& value_metas, const std::vector<int>& input_values,
                      const std::vector<int>& output_values, int64_t batch);

}  // namespace flow::lite

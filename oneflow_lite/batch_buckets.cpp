#include "oneflow_lite/batch_buckets.h"

#include <algorithm>

namespace flow::lite {

int64_t bucket_size(int64_t rows) {
  constexpr int64_t kExactUpTo = 8;
  if (rows <= kExactUpTo) return rows;
  int64_t power = kExactUpTo;  // buckets lie between power and 2 * power: power * 3 / 2, 2 * power
  while (2 * power < rows) power *= 2;
  return rows <= power * 3 / 2 ? power * 3 / 2 : 2 * power;
}

namespace {

bool has_rows(const TensorMeta& meta, int64_t batch) { return meta.shape.ndim() >= 1 && meta.shape[0] == batch; }

// Whether a signature of the step's op splits its batched inputs and its outputs on rows and
// broadcasts its other inputs.
bool splits_rows(const RowStep& step, const std::vector<TensorMeta>& value_metas, const std::vector<bool>& batched, int64_t batch) {
  if (!step.op->sbp) return false;
  std::vector<TensorMeta> inputs;
  for (int id : *step.inputs) inputs.push_back(value_metas[id]);
  const Sbp rows = Sbp::split(0);
  for (const SbpSignature& signature : step.op->sbp(inputs, *step.attrs)) {
    if (signature.inputs.size() != inputs.size() || signature.outputs.size() != step.outputs->size()) continue;
    bool matches = true;
    for (size_t i = 0; matches && i < inputs.size(); ++i) {
      matches = batched[(*step.inputs)[i]] ? signature.inputs[i] == rows : signature.inputs[i].is_broadcast();
    }
    for (const Sbp& output : signature.outputs) matches = matches && output == rows;
    if (matches && step.op->sbp_holds) matches = step.op->sbp_holds(inputs, *step.attrs, signature, batch);
    if (matches) return true;
  }
  return false;
}

}  // namespace

bool rows_independent(const std::vector<RowStep>& steps, const std::vector<TensorMeta>& value_metas, const std::vector<int>& input_values,
                      const std::vector<int>& output_values, int64_t batch) {
  std::vector<bool> batched(value_metas.size(), false);
  for (int id : input_values) {
    if (!has_rows(value_metas[id], batch)) return false;
    batched[id] = true;
  }
  for (const RowStep& step : steps) {
    const bool reads_rows = step.batch_in_attrs || std::any_of(step.inputs->begin(), step.inputs->end(), [&](int id) { return batched[id]; });
    if (!reads_rows) continue;
    if (!splits_rows(step, value_metas, batched, batch)) return false;
    for (int id : *step.outputs) {
      if (!has_rows(value_metas[id], batch)) return false;
      batched[id] = true;
    }
  }
  return std::all_of(output_values.begin(), output_values.end(), [&](int id) { return batched[id]; });
}

}  // namespace flow::lite

#pragma once
// y = x @ W^T + bias (then ReLU) in float32 on weights packed once (AVX2 + FMA), for oneflow_lite's
// linears of 2-32 rows on constant weights. OpenBLAS packs W again on every call (most of a few-row product's
// time) and oneDNN 2.6's matmul on its own packed weights runs at 0.8 of OpenBLAS's rate from 32
// rows on; this keeps W in panels of 16 output features and runs register tiles of up to 6 rows x
// 16 features over slices of K whose panel fits 16 KiB of L1, reading x where it is.
#include <cstdint>
#include <vector>

namespace flow::cpu {

class PackedLinear {
 public:
  // Whether this build can run it (AVX2 code).
  static bool available();

  // weight: (out_features, in_features) row-major; bias: out_features values or null. Copied.
  PackedLinear(int64_t in_features, int64_t out_features, const float* weight, const float* bias);

  // y (rows, out_features) = x (rows, in_features) @ W^T + bias, then ReLU when relu (NaN kept).
  // Rows of x are x_stride floats apart. Splits the panels over current_num_threads().
  void run(const float* x, int64_t rows, int64_t x_stride, float* y, bool relu) const;

 private:
  int64_t in_features_, out_features_, panels_;
  std::vector<float> packed_;  // [panel][k][16], features past out_features zero
  std::vector<float> bias_;    // padded to whole panels
};

}  // namespace flow::cpu

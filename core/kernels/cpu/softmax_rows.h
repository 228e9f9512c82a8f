#pragma once
// Contiguous rows of the softmax kernels (softmax.cpp) 16 floats at a time with AVX-512, for CPUs
// that have it (callers check dnnl_util::has_avx512_core()). Each row function makes the same
// float operations in the same order as softmax.cpp's portable loops (math::exp's polynomial, the
// blocked sums' lanes and block totals in double, one rounding per 16-bit element written), so the
// two give bitwise the same results; these also keep the lanes in registers and read and write
// bfloat16 16 elements at a time. In, Out: float or BFloat16 (float16 takes the portable loops).
#include <cstdint>

#include "core/half.h"

namespace flow::cpu {

// The blocked sums of the softmax kernels: element j of a block of kSoftmaxBlock adds into float
// lane (j - block start) % kSoftmaxLanes; each block's lanes are then added in order in double.
inline constexpr int64_t kSoftmaxLanes = 16;
inline constexpr int64_t kSoftmaxBlock = 1024;

}  // namespace flow::cpu

namespace flow::cpu::avx512 {

// Output y[0..n) of softmax (log_softmax where log_output) of x[0..n).
template <bool log_output, typename In, typename Out>
void softmax_row(const In* x, Out* y, int64_t n);

// Input gradient r[0..n) of softmax (log_softmax where log_output) from the output's gradient g and
// the output y.
template <bool log_output, typename T, typename R>
void softmax_grad_row(const T* g, const T* y, R* r, int64_t n);

// The statistics of log_softmax's row as softmax_row<true> computes them: the max (0 when it is
// infinite) and log of the blocked sum of exp(x - max).
template <typename In>
void log_sum_exp_row(const In* x, int64_t n, float* max_value, float* log_total);

// r[0..n) = exp((x - max_value) - log_total) * scale: the softmax part of the sparse softmax
// cross-entropy's gradient (the caller subtracts the one-hot term).
template <typename In>
void cross_entropy_grad_row(const In* x, float max_value, float log_total, float scale, In* r, int64_t n);

}  // namespace flow::cpu::avx512

#pragma once
// Automatic mixed precision, as torch.autocast / oneflow.autocast: while an autocast guard is
// active on a thread, the ops it dispatches follow a policy by op. Matrix products and
// convolutions run in the autocast dtype (their floating inputs are cast to it); ops that need
// range or accumulate many terms (exp/log/pow, softmax, sums and products, normalisations) run
// in float32 (softmax, log_softmax and sparse_softmax_cross_entropy read a 16-bit input directly on the CPU, writing float32); every other op runs in the dtype of its inputs. The casts are ordinary ops, so
// autograd differentiates through them: float32 parameters receive float32 gradients, and the
// optimizer updates float32 master weights. Backward passes run without autocast, in the dtypes
// the forward chose. A Graph with config().enable_amp() traces build() under this guard.
#include <optional>

#include "core/op.h"

namespace flow {

// The autocast state of one device type on one thread.
struct AutocastState {
  bool enabled = false;
  DType dtype = kBFloat16;
};

class autocast {
 public:
  // torch.autocast(device_type, dtype): ops whose inputs are on device_type follow the policy;
  // ops on other device types are left alone. dtype: bfloat16 (no loss scaling needed) or
  // float16 (pair it with amp::GradScaler); by default PyTorch's, bfloat16 on the CPU and
  // float16 on CUDA. Meta tensors follow the CPU's state.
  // device_type: its type counts, not its index (flow::kCPU, "cuda").
  explicit autocast(const Device& device_type, bool enabled = true);
  autocast(const Device& device_type, DType dtype, bool enabled = true);
  // Every device type at once (what a Graph's config().enable_amp() traces under).
  explicit autocast(DType dtype = kBFloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  static constexpr size_t kDeviceTypes = 2;  // CPU (and meta), CUDA

 private:
  AutocastState previous_[kDeviceTypes];
};

// Throws flow::Error "[op] dtype must be bfloat16 or float16, got ..." for any other autocast dtype.
void check_autocast_dtype(const char* op, DType dtype);

// Whether autocast is on for any device type, or for device_type.
bool is_autocast_enabled();
bool is_autocast_enabled(const Device& device_type);
// The dtype device_type's innermost active guard chose (its default when none is active).
DType autocast_dtype(const Device& device_type = kCPU);

// The inputs and attributes `op` runs with under the calling thread's autocast policy for its
// inputs' device type, or nullopt where it changes nothing (autocast off there, the op runs in its
// inputs' dtype, or the inputs already have the target dtype). softmax, log_softmax and sparse_softmax_cross_entropy of a 16-bit
// input on the CPU keep that input and get a float32 "dtype" attribute (their kernels widen it).
// Called by apply() before the interpreter sees the op.
struct AutocastCall {
  TensorList inputs;
  Attrs attrs;
};
std::optional<AutocastCall> autocast_call(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

}  // namespace flow

#pragma once
// Automatic mixed precision, as torch.autocast / oneflow.autocast: while an autocast guard is
// active on a thread, the ops it dispatches follow a policy by op. Matrix products and
// convolutions run in the autocast dtype (their floating inputs are cast to it); ops that need
// range or accumulate many terms (exp/log/pow, softmax, sums and products, normalisations) run
// in float32; every other op runs in the dtype of its inputs. The casts are ordinary ops, so
// autograd differentiates through them: float32 parameters receive float32 gradients, and the
// optimizer updates float32 master weights. Backward passes run without autocast, in the dtypes
// the forward chose. A Graph with config().enable_amp() traces build() under this guard.
#include <optional>

#include "core/op.h"

namespace flow {

class autocast {
 public:
  // dtype: bfloat16 (no loss scaling needed) or float16 (pair it with amp::GradScaler).
  explicit autocast(DType dtype = kBFloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

// Throws flow::Error "[op] dtype must be bfloat16 or float16, got ..." for any other autocast dtype.
void check_autocast_dtype(const char* op, DType dtype);

bool is_autocast_enabled();
DType autocast_dtype();  // the innermost active guard's dtype (bfloat16 when none is active)

// The inputs `op` runs on under the calling thread's autocast policy, or nullopt where it changes
// nothing (autocast off, the op runs in its inputs' dtype, or the inputs already have the target
// dtype). Called by apply() before the interpreter sees the op.
std::optional<TensorList> autocast_inputs(const OpDef& op, const TensorList& inputs);

}  // namespace flow

// Fused optimizer updates: one in-place op per parameter instead of several element-wise ops,
// the form a compiled Graph emits for add_optimizer as well.
#include "core/ops/optimizer_update.h"

#include "core/interpreter.h"

namespace flow {
namespace {

const OpDef& kSgdUpdate =
    OpBuilder("sgd_update")
        // In-place outputs are the leading inputs, so the buffer (when there is one) comes second.
        .inputs({"param", "momentum_buffer", "grad"}, /*variadic=*/true)
        .outputs({"param", "momentum_buffer"})
        .attrs({{"lr", AttrType::kDouble},
                {"momentum", AttrType::kDouble},
                {"dampening", AttrType::kDouble},
                {"weight_decay", AttrType::kDouble},
                {"nesterov", AttrType::kBool},
                {"buffer_initialized", AttrType::kBool}})
        .inplace()
        .infer([](const std::vector<TensorMeta>& in, const Attrs&) {
          if (in.size() != 2 && in.size() != 3) fail("sgd_update", "expected param, optional momentum buffer and grad");
          for (const auto& meta : in) {
            if (!(meta.shape == in[0].shape) || meta.dtype != in[0].dtype) {
              fail("sgd_update", "param, grad and buffer must share shape and dtype, got ", meta.shape, " ", dtype_name(meta.dtype),
                   " for param ", in[0].shape, " ", dtype_name(in[0].dtype));
            }
          }
          std::vector<TensorMeta> out{in[0]};
          if (in.size() == 3) out.push_back(in[1]);
          return out;
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return sbp::elementwise(in, attrs); })
        .def();

}  // namespace

bool sgd_update_supported(const Tensor& param, const Tensor& grad) {
  return param.is_contiguous() && grad.is_contiguous() && !param.is_lazy() &&
         kSgdUpdate.kernels.count({param.device().type, param.dtype()}) != 0;
}

void sgd_update_(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, double lr, double momentum, double dampening,
                 double weight_decay, bool nesterov, bool buffer_initialized) {
  const TensorList inputs = momentum_buffer != nullptr ? TensorList{param, *momentum_buffer, grad} : TensorList{param, grad};
  apply(kSgdUpdate, inputs,
        Attrs()
            .set("lr", lr)
            .set("momentum", momentum)
            .set("dampening", dampening)
            .set("weight_decay", weight_decay)
            .set("nesterov", nesterov)
            .set("buffer_initialized", buffer_initialized));
}

}  // namespace flow

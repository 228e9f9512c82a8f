#pragma once
// Input signatures of nn::Graph calls, torch.compile's guards: a compiled plan is specialised to
// the number of inputs and each input's shape, dtype and device (and for a global tensor its
// placement and sbp). A call whose signature no cached plan has compiles another.
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/global/placement.h"
#include "core/tensor.h"

namespace flow::graph {

struct InputGuard {
  TensorMeta meta;
  std::optional<Placement> placement;  // global tensors only
  NdSbp sbp;                           // global tensors only
  bool operator==(const InputGuard& other) const;
};
using InputSignature = std::vector<InputGuard>;

// A defined tensor's meta, and for a global tensor its placement and sbp.
InputGuard guard_of(const Tensor& t);
// The signature of a call's inputs; flow::Error naming `graph` for an undefined input.
InputSignature signature_of(const TensorList& inputs, const std::string& graph);
std::vector<TensorMeta> metas_of(const InputSignature& signature);

// "size=(64, 1, 28, 28), dtype=flow.float32, device=cpu", as OneFlow prints a tensor.
std::string meta_str(const TensorMeta& meta);
// meta_str, then ", placement=..., sbp=(S(0),)" for a global input.
std::string guard_str(const InputGuard& guard);
// "(input 0: size=..., ...; input 1: ...)".
std::string signature_str(const InputSignature& signature);
// Why `now` fails the guards of `seen`: the first input that differs and how, e.g.
// "input 0 size (64, 1, 28, 28) -> (32, 1, 28, 28)" or "number of inputs 1 -> 2"; empty when the
// signatures are equal.
std::string signature_change(const InputSignature& seen, const InputSignature& now);

}  // namespace flow::graph

// Installs the autograd recorder into core's interpreters when the library is loaded: after
// every op whose inputs require grad (with grad mode on), a backward node is made and the
// floating-point outputs point at it.
#include <memory>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/view_history.h"
#include "core/grad_mode.h"
#include "core/interpreter.h"

namespace flow::autograd {
namespace {

thread_local GradInputObserverGuard* t_observer = nullptr;

class GraphRecorder final : public AutogradRecorder {
 public:
  void record(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs) override {
    if (t_observer != nullptr) t_observer->report(inputs);
    if (!is_grad_enabled()) return;
    const bool makes_view = op.view && !op.inplace;
    bool any_requires_grad = false;
    for (const Tensor& input : inputs) any_requires_grad |= input.requires_grad();
    if (any_requires_grad) {
      auto node = std::make_shared<OpNode>(op, inputs, outputs, attrs);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const Tensor& output = outputs[i];
        if (!is_floating(output.dtype())) continue;  // indices and masks carry no gradient
        auto meta = std::make_shared<AutogradMeta>();
        meta->requires_grad = true;
        meta->grad_fn = node;
        meta->output_nr = static_cast<uint32_t>(i);
        // A view written in place stays a view: its base's history now goes through this write.
        if (std::shared_ptr<TensorImpl> base = op.inplace ? view_base(output) : nullptr) {
          meta->view_base = base;
          meta->view_base_grad_fn = rebase_history(output, op.name, node, static_cast<uint32_t>(i));
        }
        output.impl()->autograd = std::move(meta);
      }
    }
    if (makes_view) record_view(inputs[0], outputs[0]);
  }
};

struct Installer {
  Installer() { set_autograd_recorder(&recorder); }
  GraphRecorder recorder;
};
Installer installer;

}  // namespace

GradInputObserverGuard::GradInputObserverGuard(std::function<void(const Tensor&)> observe)
    : observe_(std::move(observe)), previous_(t_observer) {
  t_observer = this;
}

GradInputObserverGuard::~GradInputObserverGuard() { t_observer = previous_; }

void GradInputObserverGuard::report(const TensorList& inputs) const {
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) observe_(input);
  }
}

}  // namespace flow::autograd

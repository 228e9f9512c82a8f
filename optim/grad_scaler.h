#pragma once
// Loss scaling for float16 mixed precision, as torch.amp.GradScaler / oneflow.amp.GradScaler:
// the loss is multiplied by a scale before backward so that small float16 gradients do not
// flush to zero; step() divides the gradients by it again and skips the update when any of them
// is inf or NaN (the scale was too large), and update() halves the scale after such a step and
// doubles it after growth_interval clean steps in a row. bfloat16 has float32's range and needs
// none of this; a disabled scaler passes everything through.
#include <map>

#include "core/serialization.h"
#include "optim/optimizer.h"

namespace flow::amp {

struct GradScalerOptions {
  GradScalerOptions& init_scale(double value) { init_scale_ = value; return *this; }
  GradScalerOptions& growth_factor(double value) { growth_factor_ = value; return *this; }
  GradScalerOptions& backoff_factor(double value) { backoff_factor_ = value; return *this; }
  GradScalerOptions& growth_interval(int64_t value) { growth_interval_ = value; return *this; }
  GradScalerOptions& enabled(bool value) { enabled_ = value; return *this; }

  double init_scale_ = 65536.0;
  double growth_factor_ = 2.0;
  double backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
  bool enabled_ = true;
};

// The sum of t * 0 in float32: 0, or NaN when t holds an inf or NaN. The check behind step()'s
// skip, and traced the same way by nn::Graph's grad scaler.
Tensor zero_or_nan(const Tensor& t);

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of optimizer's parameters by the scale, in place, and records whether
  // any is inf or NaN. Once per optimizer between update()s; step() calls it when not yet done.
  void unscale_(optim::Optimizer& optimizer);
  // optimizer.step() unless the unscaled gradients hold an inf or NaN; returns whether it stepped.
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale from the steps since the last update(): backoff after any skipped step,
  // growth after growth_interval clean ones.
  void update();

  // The scale and growth tracker as a Graph's Job left them after its last call: nn::Graph's grad
  // scaler unscales, checks, skips and updates the scale inside its Job, as step() and update() do.
  void set_progress(double scale, int64_t growth_tracker);
  const GradScalerOptions& options() const { return options_; }

  double get_scale() const { return options_.enabled_ ? scale_ : 1.0; }
  bool is_enabled() const { return options_.enabled_; }
  int64_t growth_tracker() const { return growth_tracker_; }

  // The scale, factors, interval and growth tracker, as metadata (no tensors).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  struct OptimizerState {
    bool unscaled = false;
    bool found_inf = false;
    bool stepped = false;
  };
  OptimizerState& state_of(const optim::Optimizer& optimizer);

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const optim::Optimizer*, OptimizerState> per_optimizer_;
};

}  // namespace flow::amp

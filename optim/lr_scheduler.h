#pragma once
// Learning-rate schedulers (torch.optim.lr_scheduler), in closed form: the lr of each group at
// epoch e is a function of its initial lr and e, so resuming from last_epoch is exact.
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace flow::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // Advances one epoch (or iteration) and sets every group's lr.
  void step();
  std::vector<double> get_last_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  // Jumps to `epoch` (for resuming) and sets the lrs for it.
  void set_last_epoch(int64_t epoch);
  // lr at `epoch` for a group whose initial lr is base_lr.
  virtual double lr_at(double base_lr, int64_t epoch) const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Subclasses call this at the end of their constructor.
  void initialize() { set_last_epoch(0); }

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

// lr * gamma^(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma^(number of milestones <= epoch)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr * gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  double gamma_;
};

// eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// lr * factor, factor going linearly from start_factor to end_factor over total_iters (warm-up).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// Runs schedulers one after another, switching at each milestone (each restarts at epoch 0).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace flow::optim

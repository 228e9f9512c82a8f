#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace flow::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& group : optimizer.param_groups()) {
    // The first scheduler on an optimizer records each group's initial lr.
    auto [it, inserted] = group.options.try_emplace("initial_lr", group.options.at("lr"));
    base_lrs_.push_back(it->second);
  }
}

void LRScheduler::step() { set_last_epoch(last_epoch_ + 1); }

void LRScheduler::set_last_epoch(int64_t epoch) {
  last_epoch_ = epoch;
  auto& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size() && g < base_lrs_.size(); ++g) groups[g].options["lr"] = lr_at(base_lrs_[g], epoch);
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> lrs;
  for (const auto& group : optimizer_.param_groups()) lrs.push_back(group.options.at("lr"));
  return lrs;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size < 1) fail("StepLR", "step_size must be positive, got ", step_size);
  initialize();
}
double StepLR::lr_at(double base_lr, int64_t epoch) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  if (!std::is_sorted(milestones_.begin(), milestones_.end())) fail("MultiStepLR", "milestones must be increasing");
  initialize();
}
double MultiStepLR::lr_at(double base_lr, int64_t epoch) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) { initialize(); }
double ExponentialLR::lr_at(double base_lr, int64_t epoch) const { return base_lr * std::pow(gamma_, static_cast<double>(epoch)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  if (t_max < 1) fail("CosineAnnealingLR", "T_max must be positive, got ", t_max);
  initialize();
}
double CosineAnnealingLR::lr_at(double base_lr, int64_t epoch) const {
  return eta_min_ + (base_lr - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(t_max_))) / 2;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  if (start_factor <= 0 || start_factor > 1) fail("LinearLR", "start_factor must be in (0, 1], got ", start_factor);
  if (end_factor < 0 || end_factor > 1) fail("LinearLR", "end_factor must be in [0, 1], got ", end_factor);
  if (total_iters < 1) fail("LinearLR", "total_iters must be positive, got ", total_iters);
  initialize();
}
double LinearLR::lr_at(double base_lr, int64_t epoch) const {
  const double progress = static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * progress);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  if (schedulers_.empty() || milestones_.size() + 1 != schedulers_.size()) {
    fail("SequentialLR", "expected one milestone fewer than schedulers, got ", schedulers_.size(), " schedulers and ",
         milestones_.size(), " milestones");
  }
  initialize();
}
double SequentialLR::lr_at(double base_lr, int64_t epoch) const {
  const auto index = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  const int64_t start = index == 0 ? 0 : milestones_[index - 1];
  return schedulers_[index]->lr_at(base_lr, epoch - start);
}

}  // namespace flow::optim

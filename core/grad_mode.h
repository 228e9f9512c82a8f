#pragma once
// The grad-mode switch: whether ops record backward nodes on this thread, and the guards that set
// it for a scope (torch.no_grad(), torch.set_grad_enabled()). In core, with no other dependency,
// because the interpreters read it and the actor runtime's threads turn it off.

namespace flow {

// On by default; off under NoGradGuard.
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

}  // namespace flow

namespace flow::autograd {

// RAII: no backward nodes are recorded while it lives (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// RAII: sets grad mode to `enabled` while it lives (like torch.set_grad_enabled(...)).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace flow::autograd

// The grad-mode switch (core/grad_mode.h), on its own so that code which only turns recording off
// (the actor runtime's threads) links without the rest of autograd: the runtime's ThreadSanitizer
// tests (tests/CMakeLists.txt) build it alone.
#include "core/grad_mode.h"

namespace flow {
namespace {
thread_local bool t_grad_enabled = true;
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace flow

// The grad-mode switch declared in autograd_meta.h, on its own so that code which only turns
// recording off (the actor runtime's threads) links without the rest of autograd: the runtime's
// ThreadSanitizer tests (tests/CMakeLists.txt) build it alone.
#include "core/autograd_meta.h"

namespace flow {
namespace {
thread_local bool t_grad_enabled = true;
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace flow

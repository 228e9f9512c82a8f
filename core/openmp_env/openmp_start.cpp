// Sets GOMP_SPINCOUNT before libgomp reads it, when the user set neither it nor OMP_WAIT_POLICY
// (why, and how this runs first: core/openmp_env/openmp_env.h). Needs nothing but libc.
#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace {

constexpr const char* kSpinCount = "1000";

// libgomp's thread count is 1 until its initialiser has read the environment (then the CPU count
// or OMP_NUM_THREADS). With one thread there are no teammates to wait for, so a start we cannot
// tell apart from "not started" costs nothing.
bool libgomp_started() {
  using MaxThreads = int (*)();
  const auto max_threads = reinterpret_cast<MaxThreads>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  return max_threads != nullptr && max_threads() > 1;
}

std::string apply_default_wait_policy() {
  for (const char* name : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"}) {
    if (const char* value = std::getenv(name)) return std::string(name) + "=" + value + " (from the environment)";
  }
  if (libgomp_started()) return "libgomp's default spinning: it started before flow could set GOMP_SPINCOUNT";
  setenv("GOMP_SPINCOUNT", kSpinCount, /*overwrite=*/0);
  return std::string("GOMP_SPINCOUNT=") + kSpinCount + " (flow's default)";
}

const std::string g_wait_policy = apply_default_wait_policy();

}  // namespace

extern "C" const char* flow_openmp_start_wait_policy() { return g_wait_policy.c_str(); }

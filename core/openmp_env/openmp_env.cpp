#include "core/openmp_env/openmp_env.h"

extern "C" const char* flow_openmp_start_wait_policy();

namespace flow {

const char* openmp_wait_policy() { return flow_openmp_start_wait_policy(); }

}  // namespace flow

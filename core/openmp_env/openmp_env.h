#pragma once

namespace flow {

// How long libgomp's idle threads busy-wait before they sleep (the wait policy oneDNN, OpenBLAS
// and flow's own kernels share), and where that came from: "GOMP_SPINCOUNT=1000 (flow's
// default)", the user's GOMP_SPINCOUNT or OMP_WAIT_POLICY "(from the environment)", or a note
// that libgomp had started before flow could set it.
//
// libgomp's default spins for about 300,000 iterations at every barrier and between parallel
// regions. When other processes compete for the cores, a spinning thread burns the time slice its
// descheduled teammate needs, and a training step runs 10-25x slower instead of ~2x. So unless the
// user set GOMP_SPINCOUNT or OMP_WAIT_POLICY, flow sets GOMP_SPINCOUNT=1000 (spin briefly, then
// sleep). libgomp reads its variables once, in its initialiser, so flow's must run first. glibc
// runs initialisers dependencies first; among the rest it starts from the end of the breadth-first
// list of needed libraries, each with a depth-first walk of its own needed list. So the library
// that sets the variable (libflow_openmp_start) is needed only by this one (libflow_openmp_env),
// which flow_core lists before OpenBLAS, oneDNN and libgomp: it sits deeper than libgomp in the
// breadth-first list, and comes first in any walk through flow_core. A program that starts libgomp
// before flow (a library of its own deeper than flow_core that needs libgomp, or dlopen) keeps
// libgomp's setting; flow says so in its log.
const char* openmp_wait_policy();

}  // namespace flow

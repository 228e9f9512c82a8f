// Line-buffered stdout for the ranks of a flow_run job. A rank's stdout is a pipe to the launcher,
// which C stdio block-buffers: progress lines showed up kilobytes late, and a rank killed while
// the job was stopped lost them all. flow_run sets FLOW_LINE_BUFFERED=1, and the library switches
// stdout to line buffering as it loads, before main() prints (std::cout writes through stdout
// while it is synchronised with stdio, the default). stderr is unbuffered already. A pipe is kept
// rather than a pseudo-terminal, which would make isatty() true and change what programs print.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flow {
namespace {

[[maybe_unused]] const bool stdout_line_buffered = [] {
  const char* setting = std::getenv("FLOW_LINE_BUFFERED");
  if (setting == nullptr || *setting == '\0' || std::strcmp(setting, "0") == 0) return false;
  // With no buffer given, glibc only sets the mode: safe even after output was buffered.
  return std::setvbuf(stdout, nullptr, _IOLBF, 0) == 0;
}();

}  // namespace
}  // namespace flow

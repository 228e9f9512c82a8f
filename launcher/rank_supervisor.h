#pragma once
// The ranks flow_run supervises (a job, in torchrun's words): N local ranks of one program, each
// with torchrun's environment, their output prefixed by rank (and written to per-rank log files on
// request), stopped together when one fails, on a signal or on a timeout.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace flow::launcher {

// A rank's output streams, as bits (torchrun's --tee and --redirects values: 1, 2, 3 for both).
inline constexpr int kStdoutStream = 1;
inline constexpr int kStderrStream = 2;
inline constexpr int kBothStreams = kStdoutStream | kStderrStream;

struct LaunchSpec {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // resolved: never 0 here
  // argv of every rank; command[0] is what the user typed, program its resolved path.
  std::vector<std::string> command;
  std::string program;
  // How long a rank may take to exit after SIGTERM (or the forwarded signal) before SIGKILL.
  std::chrono::milliseconds kill_timeout{10'000};
  // The whole job's limit; none: unlimited.
  std::optional<std::chrono::milliseconds> timeout;
  // Every rank's FLOW_RDZV_ID: rank 0's store serves only ranks with this id (empty: none).
  std::string rdzv_id;
  // The streams of each rank written to log_dir/<global rank>/stdout.log and stderr.log (none
  // when log_dir is empty), and those copied, prefixed, to flow_run's own stdout and stderr.
  std::string log_dir;
  int logged_streams = 0;
  int console_streams = kBothStreams;
};

// flow_run's exit statuses besides 0 (all ranks exited 0).
inline constexpr int kExitRankFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;  // as GNU timeout
// A forwarded SIGINT or SIGTERM ends flow_run with 128 + the signal, as a shell reports it.

// The executable that `name` runs: itself when it has a '/', else the first match on PATH.
// Nothing when there is no such executable regular file.
std::optional<std::string> resolve_program(const std::string& name);

// A TCP port that was free on address a moment ago: bound with port 0, read, closed. Another
// process may take it before rank 0 binds it (a small race torchrun's default has too).
// Nothing when address cannot be bound; error then says why.
std::optional<int> pick_free_port(const std::string& address, std::string& error);

// A fresh rendezvous id: 16 random hexadecimal digits.
std::string random_rdzv_id();

// Creates directory and its missing parents; false (error says why) when it cannot.
bool make_directories(const std::string& directory, std::string& error);

// Runs the job to the end and returns flow_run's exit status.
int run_ranks(const LaunchSpec& spec);

}  // namespace flow::launcher

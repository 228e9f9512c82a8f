// flow_run: starts the ranks of a distributed job on this node, as torchrun does.
//   flow_run --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
//            [--rdzv-id ID] [--log-dir DIR [--tee S] [--redirects S]]
//            [--timeout S] [--kill-timeout S] [--] PROGRAM ARGS...
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "launcher/rank_supervisor.h"

namespace {

// A year: longer waits would overflow the clock's arithmetic and mean "forever" anyway.
constexpr double kLongestWait = 365 * 24 * 3600.0;

std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "flow_run: " << message << "\nRun with --help for more information.\n";
  std::exit(flow::launcher::kExitUsage);
}

// Which streams go to the log files and which to the console, as torchrun's --tee (both) and
// --redirects (files only); a stream named by neither goes to the console only. --log-dir alone
// logs both streams and keeps them on the console, as --tee 3.
void resolve_streams(flow::launcher::LaunchSpec& spec, std::optional<int> tee, std::optional<int> redirects) {
  if (spec.log_dir.empty()) {
    if (tee) usage_error("--tee needs --log-dir (the directory of the log files)");
    if (redirects) usage_error("--redirects needs --log-dir (the directory of the log files)");
    return;
  }
  if (!tee && !redirects) tee = flow::launcher::kBothStreams;
  spec.logged_streams = tee.value_or(0) | redirects.value_or(0);
  spec.console_streams = flow::launcher::kBothStreams & ~redirects.value_or(0);
  std::string error;
  if (!flow::launcher::make_directories(spec.log_dir, error)) usage_error("--log-dir " + spec.log_dir + ": " + error);
}

// The command line, checked and resolved; exits 0 after --help, 2 after a usage error.
flow::launcher::LaunchSpec parse_args(int argc, char** argv) {
  flow::launcher::LaunchSpec spec;
  double kill_timeout_secs = 10;
  double timeout_secs = 0;
  std::optional<std::string> rdzv_id;
  std::optional<int> tee;
  std::optional<int> redirects;
  CLI::App app(
      "flow_run: starts --nproc-per-node ranks of PROGRAM on this node (torchrun's contract).\n"
      "Each rank gets MASTER_ADDR, MASTER_PORT, WORLD_SIZE (nproc-per-node * nnodes), RANK\n"
      "(node-rank * nproc-per-node + local rank), LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (node-rank),\n"
      "and OMP_NUM_THREADS=1 unless OMP_NUM_THREADS is set (torchrun's default), stdin from /dev/null.\n"
      "It also gets FLOW_RDZV_ID (--rdzv-id), and FLOW_LINE_BUFFERED=1 unless set: a program linked with\n"
      "flow then line-buffers its stdout, so each line shows as it is printed.\n"
      "Every line a rank prints is prefixed with [rankR]: . With --log-dir each rank's stdout and stderr\n"
      "are also written to DIR/<rank>/stdout.log and stderr.log. When a rank fails, the others get\n"
      "SIGTERM, then SIGKILL after --kill-timeout; SIGINT and SIGTERM are forwarded to every rank likewise.\n"
      "Exit status: 0 when every rank exited 0; 1 when a rank failed; 2 on a usage error; 124 after\n"
      "--timeout; 128+N after signal N was forwarded.");
  app.option_defaults()->always_capture_default();
  app.add_option("--nproc-per-node", spec.nproc_per_node, "ranks to start on this node")
      ->check(flow::cli::at_least(1));
  app.add_option("--nnodes", spec.nnodes, "nodes in the job")->check(flow::cli::at_least(1));
  app.add_option("--node-rank", spec.node_rank, "this node's index, below --nnodes")->check(flow::cli::at_least(0));
  app.add_option("--master-addr", spec.master_addr, "address of rank 0's node");
  app.add_option("--master-port", spec.master_port,
                 "port rank 0 listens on (0: a free port on --master-addr; needs --nnodes 1)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--rdzv-id", rdzv_id,
                 "the job's id, every rank's FLOW_RDZV_ID: rank 0's store serves only ranks with the same id,\n"
                 "so another job started on the same port can neither join nor abort this one. Give every node\n"
                 "of a multi-node job the same id")
      ->check(CLI::Validator([](std::string& id) { return id.empty() ? "must not be empty" : ""; }, "ID"))
      ->default_str("random with --nnodes 1, else none");
  app.add_option("--log-dir", spec.log_dir,
                 "write each rank's stdout and stderr to DIR/<rank>/stdout.log and stderr.log (both, unless\n"
                 "--tee or --redirects say which; <rank> is the global rank)");
  app.add_option("--tee", tee, "streams written to the log files and to the console: 0 none, 1 stdout, 2 stderr, 3 both")
      ->check(CLI::Range(0, 3))
      ->default_str("3 with --log-dir");
  app.add_option("--redirects", redirects,
                 "streams written to the log files instead of the console: 0 none, 1 stdout, 2 stderr, 3 both")
      ->check(CLI::Range(0, 3))
      ->default_str("0");
  app.add_option("--timeout", timeout_secs, "stop every rank and exit 124 when the job runs longer (seconds)")
      ->check(flow::cli::positive(kLongestWait))
      ->default_str("none");
  app.add_option("--kill-timeout", kill_timeout_secs, "seconds a rank has to exit after SIGTERM before SIGKILL")
      ->check(CLI::Range(0.0, kLongestWait));
  // Everything from PROGRAM on is the rank's command line, options included; `--` may precede it.
  app.add_option("PROGRAM", spec.command, "the program every rank runs, then its arguments")->required();
  app.positionals_at_end();
  if (const std::optional<int> status = flow::cli::parse(app, argc, argv)) std::exit(*status);

  if (spec.node_rank >= spec.nnodes) {
    usage_error("--node-rank " + std::to_string(spec.node_rank) + " must be below --nnodes " +
                std::to_string(spec.nnodes));
  }
  const std::optional<std::string> program = flow::launcher::resolve_program(spec.command.front());
  if (!program) usage_error("PROGRAM '" + spec.command.front() + "' is not an executable file (nor on PATH)");
  spec.program = *program;
  if (spec.master_port == 0) {
    // The other nodes could not learn a port this node picked.
    if (spec.nnodes > 1) usage_error("--master-port must be given when --nnodes is above 1");
    std::string error;
    const std::optional<int> port = flow::launcher::pick_free_port(spec.master_addr, error);
    if (!port) usage_error("--master-addr " + spec.master_addr + ": cannot bind a free port: " + error);
    spec.master_port = *port;
  }
  // torchrun's --nnodes 1 run without --rdzv-id gets a fresh id; nodes of one job need the same.
  spec.rdzv_id = rdzv_id ? *rdzv_id : spec.nnodes == 1 ? flow::launcher::random_rdzv_id() : "";
  resolve_streams(spec, tee, redirects);
  spec.kill_timeout = to_milliseconds(kill_timeout_secs);
  if (timeout_secs > 0) spec.timeout = to_milliseconds(timeout_secs);
  if (spec.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr && std::getenv("FLOW_NUM_THREADS") == nullptr) {
    // torchrun's warning: a rank's flow kernels run on OMP_NUM_THREADS threads.
    std::cerr << "flow_run: setting OMP_NUM_THREADS=1 for each rank (it was not set), so that " << spec.nproc_per_node
              << " ranks do not each start a thread per core; set OMP_NUM_THREADS (or FLOW_NUM_THREADS) to tune it\n";
  }
  return spec;
}

}  // namespace

int main(int argc, char** argv) { return flow::launcher::run_ranks(parse_args(argc, argv)); }

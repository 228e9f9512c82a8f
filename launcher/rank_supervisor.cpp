#include "launcher/rank_supervisor.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <tuple>

#include "launcher/line_prefixer.h"

extern char** environ;

namespace flow::launcher {

namespace {

using Clock = std::chrono::steady_clock;

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

// "exited with code 3" or "was killed by signal 9 (Killed)", from a waitpid status.
std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  const int signal = WTERMSIG(status);
  return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

std::string got_signal_message(int signal) { return std::string("got SIG") + sigabbrev_np(signal); }

void report(const std::string& message) { write_fully(STDERR_FILENO, "flow_run: " + message + "\n"); }

// The environment of one rank: flow_run's own, with torchrun's variables set for this rank.
std::vector<std::string> rank_environment(const LaunchSpec& spec, int local_rank) {
  const std::vector<std::pair<std::string, std::string>> rank_variables = {
      {"MASTER_ADDR", spec.master_addr},
      {"MASTER_PORT", std::to_string(spec.master_port)},
      {"WORLD_SIZE", std::to_string(spec.nproc_per_node * spec.nnodes)},
      {"RANK", std::to_string(spec.node_rank * spec.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(spec.nproc_per_node)},
      {"GROUP_RANK", std::to_string(spec.node_rank)},
      {"FLOW_RDZV_ID", spec.rdzv_id},
  };
  std::vector<std::string> environment;
  bool has_omp_threads = false;
  bool has_line_buffered = false;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view variable(*entry);
    const std::string_view name = variable.substr(0, variable.find('='));
    has_omp_threads = has_omp_threads || name == "OMP_NUM_THREADS";
    has_line_buffered = has_line_buffered || name == "FLOW_LINE_BUFFERED";
    const bool overridden = std::any_of(rank_variables.begin(), rank_variables.end(),
                                        [&](const auto& rank_variable) { return rank_variable.first == name; });
    if (!overridden) environment.emplace_back(variable);
  }
  for (const auto& [name, value] : rank_variables) environment.push_back(name + "=" + value);
  // N ranks each starting one OpenMP thread per core would oversubscribe the machine N times.
  if (!has_omp_threads) environment.emplace_back("OMP_NUM_THREADS=1");
  // The rank's stdout is a pipe, which C stdio block-buffers: a program linked with flow
  // line-buffers it instead (core/line_buffering.cpp), so lines arrive as they are printed.
  if (!has_line_buffered) environment.emplace_back("FLOW_LINE_BUFFERED=1");
  return environment;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

struct Rank {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  bool running = false;
  LinePrefixer stdout_lines;
  LinePrefixer stderr_lines;
};

// Why the job is being stopped, if it is.
enum class StopReason { none, rank_failed, signal, timeout };

class Supervisor {
 public:
  explicit Supervisor(const LaunchSpec& spec) : spec_(spec) {}
  ~Supervisor() {
    if (signal_fd_ >= 0) close(signal_fd_);
  }

  int run() {
    if (!take_signals()) return kExitRankFailed;
    started_ = Clock::now();
    for (int local_rank = 0; local_rank < spec_.nproc_per_node; ++local_rank) {
      if (!start_rank(local_rank)) {
        stop_reason_ = StopReason::rank_failed;
        stop_all(SIGTERM);
        break;
      }
    }
    while (std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) { return rank.running; })) wait_for_events();
    return exit_status();
  }

 private:
  // SIGCHLD, SIGINT and SIGTERM arrive on a descriptor polled with the ranks' output; blocked
  // before the first fork, so none is lost. SIGPIPE is ignored: a closed log reader is not fatal.
  bool take_signals() {
    sigset_t signals;
    sigemptyset(&signals);
    for (int signal : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&signals, signal);
    sigprocmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    signal_fd_ = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) report(std::string("cannot create a signalfd: ") + strerror(errno));
    return signal_fd_ >= 0;
  }

  bool start_rank(int local_rank) {
    const int global_rank = spec_.node_rank * spec_.nproc_per_node + local_rank;
    int out_log = -1, err_log = -1;
    if (!open_logs(global_rank, out_log, err_log)) return false;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      close_all({out_log, err_log});
      return fail_to_start(local_rank, "pipe", errno);
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
      const int error = errno;
      close_all({out[0], out[1], out_log, err_log});
      return fail_to_start(local_rank, "pipe", error);
    }
    const std::string prefix = "[rank" + std::to_string(global_rank) + "]: ";
    const auto console = [&](int stream, int fd) { return (spec_.console_streams & stream) != 0 ? fd : -1; };
    ranks_.push_back(Rank{local_rank, global_rank, -1, false,
                          LinePrefixer(out[0], console(kStdoutStream, STDOUT_FILENO), prefix, out_log),
                          LinePrefixer(err[0], console(kStderrStream, STDERR_FILENO), prefix, err_log)});
    // Everything the child uses is built before fork.
    std::vector<std::string> environment = rank_environment(spec_, local_rank);
    std::vector<std::string> arguments = spec_.command;
    const std::vector<char*> envp = pointers_to(environment);
    const std::vector<char*> argv = pointers_to(arguments);
    const pid_t launcher = getpid();

    const pid_t pid = fork();
    const int fork_error = errno;
    if (pid == 0) exec_rank(launcher, out[1], err[1], argv, envp);
    close(out[1]);
    close(err[1]);
    if (pid < 0) return fail_to_start(local_rank, "fork", fork_error);
    // Also here, not only in the child: the group must exist before the first killpg.
    setpgid(pid, pid);
    for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ranks_.back().pid = pid;
    ranks_.back().running = true;
    return true;
  }

  // Opens log_dir/<rank>/stdout.log and stderr.log (those of the logged streams), truncated;
  // -1 for a stream not logged. False (reported) when one cannot be opened.
  bool open_logs(int global_rank, int& out_log, int& err_log) {
    if (spec_.logged_streams == 0) return true;
    const std::string directory = spec_.log_dir + "/" + std::to_string(global_rank);
    std::string error;
    if (!make_directories(directory, error)) {
      report("cannot create the log directory " + directory + ": " + error);
      return false;
    }
    for (const auto& [stream, name, fd] : {std::tuple{kStdoutStream, "stdout.log", &out_log},
                                          std::tuple{kStderrStream, "stderr.log", &err_log}}) {
      if ((spec_.logged_streams & stream) == 0) continue;
      const std::string path = directory + "/" + name;
      *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (*fd < 0) {
        report("cannot open " + path + ": " + strerror(errno));
        close_all({out_log, err_log});
        return false;
      }
    }
    return true;
  }

  static void close_all(std::initializer_list<int> fds) {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }

  bool fail_to_start(int local_rank, const char* call, int error) {
    report("cannot start local rank " + std::to_string(local_rank) + ": " + call + ": " + strerror(error));
    return false;
  }

  // In the child, between fork and exec.
  [[noreturn]] void exec_rank(pid_t launcher, int out, int err, const std::vector<char*>& argv,
                              const std::vector<char*>& envp) {
    // If flow_run dies, even by SIGKILL (a CTest timeout), no rank is left running. It may have
    // died before the prctl took effect, hence the parent check.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    // Each rank leads its own process group, so a signal reaches the processes it started too.
    setpgid(0, 0);
    const int null_input = open("/dev/null", O_RDONLY);
    // A rank is not in the terminal's foreground group: reading the terminal would stop it.
    dup2(null_input, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    // Blocked signals and ignored dispositions would survive exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::signal(SIGPIPE, SIG_DFL);
    execve(spec_.program.c_str(), argv.data(), envp.data());
    const std::string message = "flow_run: cannot execute " + spec_.program + ": " + strerror(errno) + "\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }

  void wait_for_events() {
    std::vector<pollfd> watched{{signal_fd_, POLLIN, 0}};
    for (const Rank& rank : ranks_) {
      for (const LinePrefixer* lines : {&rank.stdout_lines, &rank.stderr_lines}) {
        if (lines->open()) watched.push_back({lines->source_fd(), POLLIN, 0});
      }
    }
    const int ready = poll(watched.data(), watched.size(), milliseconds_to_next_deadline());
    if (ready < 0 && errno != EINTR) {
      report(std::string("poll failed: ") + strerror(errno) + "; killing every rank");
      kill_and_reap_all();
      return;
    }
    for (size_t i = 1; ready > 0 && i < watched.size(); ++i) {
      if (watched[i].revents == 0) continue;
      for (Rank& rank : ranks_) {
        for (LinePrefixer* lines : {&rank.stdout_lines, &rank.stderr_lines}) {
          if (lines->source_fd() == watched[i].fd) lines->read_available();
        }
      }
    }
    if (ready > 0 && watched[0].revents != 0) handle_signals();
    check_deadlines();
  }

  int milliseconds_to_next_deadline() const {
    std::optional<Clock::time_point> next = kill_deadline_;
    if (spec_.timeout && stop_reason_ == StopReason::none) {
      const Clock::time_point job_deadline = started_ + *spec_.timeout;
      next = next ? std::min(*next, job_deadline) : job_deadline;
    }
    if (!next) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
  }

  void handle_signals() {
    signalfd_siginfo info{};
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      const int signal = static_cast<int>(info.ssi_signo);
      if (signal == SIGCHLD) {
        reap_ranks();
      } else if (stop_reason_ == StopReason::none) {
        report(got_signal_message(signal) + "; forwarding it to every rank");
        stop_reason_ = StopReason::signal;
        stop_signal_ = signal;
        stop_all(signal);
      } else {
        // A Ctrl-C while stopping: the user does not want to wait for the grace period.
        report(got_signal_message(signal) + " while stopping; killing every rank");
        stop_all(SIGKILL);
      }
    }
  }

  void reap_ranks() {
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      for (Rank& rank : ranks_) {
        if (rank.pid == pid && rank.running) on_rank_exit(rank, status);
      }
    }
  }

  void on_rank_exit(Rank& rank, int status) {
    rank.running = false;
    rank.stdout_lines.drain_and_close();
    rank.stderr_lines.drain_and_close();
    const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || stop_reason_ != StopReason::none) return;
    stop_reason_ = StopReason::rank_failed;
    first_failure_ = "rank " + std::to_string(rank.global_rank) + " (local rank " + std::to_string(rank.local_rank) +
                     ", pid " + std::to_string(rank.pid) + ") " + describe_exit(status);
    report(first_failure_ + "; stopping the other ranks");
    stop_all(SIGTERM);
  }

  // The way out when flow_run can no longer watch its ranks.
  void kill_and_reap_all() {
    stop_all(SIGKILL);
    for (Rank& rank : ranks_) {
      if (rank.running) waitpid(rank.pid, nullptr, 0);
      rank.running = false;
    }
    if (stop_reason_ == StopReason::none) stop_reason_ = StopReason::rank_failed;
  }

  // Sends signal to every running rank's process group; anything but SIGKILL starts the grace
  // period after which the ranks still running get SIGKILL.
  void stop_all(int signal) {
    for (const Rank& rank : ranks_) {
      if (rank.running && killpg(rank.pid, signal) != 0) kill(rank.pid, signal);
    }
    if (signal == SIGKILL) {
      kill_deadline_.reset();
    } else if (!kill_deadline_) {
      kill_deadline_ = Clock::now() + spec_.kill_timeout;
    }
  }

  void check_deadlines() {
    const Clock::time_point now = Clock::now();
    if (spec_.timeout && stop_reason_ == StopReason::none && now >= started_ + *spec_.timeout) {
      report("the job ran longer than --timeout (" + seconds(*spec_.timeout) + "); stopping every rank");
      stop_reason_ = StopReason::timeout;
      stop_all(SIGTERM);
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      std::string still_running;
      for (const Rank& rank : ranks_) {
        if (rank.running) still_running += " " + std::to_string(rank.global_rank);
      }
      report("ranks still running after --kill-timeout (" + seconds(spec_.kill_timeout) + "):" + still_running +
             "; sending SIGKILL");
      stop_all(SIGKILL);
    }
  }

  static std::string seconds(std::chrono::milliseconds duration) {
    std::ostringstream text;
    text << duration.count() / 1000.0 << " s";
    return text.str();
  }

  int exit_status() const {
    switch (stop_reason_) {
      case StopReason::none:
        return 0;
      case StopReason::rank_failed:
        if (!first_failure_.empty()) report("job failed: " + first_failure_ + " first");
        return kExitRankFailed;
      case StopReason::signal:
        return 128 + stop_signal_;
      case StopReason::timeout:
        return kExitTimeout;
    }
    return kExitRankFailed;
  }

  const LaunchSpec& spec_;
  std::vector<Rank> ranks_;
  int signal_fd_ = -1;
  Clock::time_point started_;
  StopReason stop_reason_ = StopReason::none;
  int stop_signal_ = 0;
  std::string first_failure_;
  std::optional<Clock::time_point> kill_deadline_;
};

}  // namespace

std::optional<std::string> resolve_program(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  const char* path = getenv("PATH");
  std::istringstream directories(path != nullptr ? path : "/bin:/usr/bin");
  for (std::string directory; std::getline(directories, directory, ':');) {
    // An empty entry means the current directory, as for execvp.
    const std::string candidate = (directory.empty() ? "." : directory) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

std::string random_rdzv_id() {
  std::random_device random;
  std::ostringstream id;
  id << std::hex << std::setfill('0');
  for (int part = 0; part < 2; ++part) id << std::setw(8) << random();
  return id.str();
}

bool make_directories(const std::string& directory, std::string& error) {
  std::error_code failure;
  std::filesystem::create_directories(directory, failure);
  if (failure) {
    error = failure.message();
    return false;
  }
  if (!std::filesystem::is_directory(directory, failure)) {
    error = "not a directory";
    return false;
  }
  return true;
}

std::optional<int> pick_free_port(const std::string& address, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int failure = getaddrinfo(address.c_str(), "0", &hints, &addresses); failure != 0) {
    error = gai_strerror(failure);
    return std::nullopt;
  }
  std::optional<int> port;
  error = "no address to bind";
  for (const addrinfo* candidate = addresses; candidate != nullptr && !port; candidate = candidate->ai_next) {
    const int fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(addresses);
  return port;
}

int run_ranks(const LaunchSpec& spec) { return Supervisor(spec).run(); }

}  // namespace flow::launcher

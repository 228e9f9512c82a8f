#pragma once
// flow_run started in the background by a test, to be signalled while it runs: its stdout and
// stderr (one pipe), waits with deadlines, and SIGKILL when the test ends early.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace launcher_test {

using Clock = std::chrono::steady_clock;

class LaunchedJob {
 public:
  explicit LaunchedJob(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), FLOW_RUN_PATH);
    std::vector<char*> argv;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    int output[2];
    if (pipe(output) != 0) return;
    const pid_t test_process = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // A crashing test leaves no launcher behind.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != test_process) _exit(1);
      dup2(output[1], STDOUT_FILENO);
      dup2(output[1], STDERR_FILENO);
      close(output[0]);
      close(output[1]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(output[1]);
    output_fd_ = output[0];
    fcntl(output_fd_, F_SETFL, O_NONBLOCK);
  }
  LaunchedJob(const LaunchedJob&) = delete;
  LaunchedJob& operator=(const LaunchedJob&) = delete;
  ~LaunchedJob() {
    if (pid_ > 0 && !status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (output_fd_ >= 0) close(output_fd_);
  }

  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

  // Reads until the output holds text `times` times; false when it did not within `limit`.
  bool read_until(const std::string& text, int times, std::chrono::seconds limit) {
    const Clock::time_point deadline = Clock::now() + limit;
    while (occurrences(text) < times) {
      if (Clock::now() > deadline || !read_some(deadline)) return false;
    }
    return true;
  }

  // flow_run's waitpid status once it exits, reading its output meanwhile; nothing after limit.
  std::optional<int> wait(std::chrono::seconds limit) {
    const Clock::time_point deadline = Clock::now() + limit;
    while (!status_ && Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
      } else {
        read_some(std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
      }
    }
    if (status_) {
      while (read_some(Clock::now())) {
      }
    }
    return status_;
  }

 private:
  int occurrences(const std::string& text) const {
    int count = 0;
    for (size_t at = output_.find(text); at != std::string::npos; at = output_.find(text, at + 1)) ++count;
    return count;
  }

  // Appends what arrives before deadline; false at end of output or when nothing came.
  bool read_some(Clock::time_point deadline) {
    pollfd readable{output_fd_, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (poll(&readable, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) return false;
    char buffer[4096];
    const ssize_t n = read(output_fd_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
  std::optional<int> status_;
};

}  // namespace launcher_test

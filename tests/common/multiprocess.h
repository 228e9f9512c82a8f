#pragma once
// Runs a test binary as N ranks of one job, with torchrun's environment (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), until the flow_run launcher
// can do it. Children die with the launcher (PR_SET_PDEATHSIG); a deadline kills the whole set.
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace flow::testing {

// A port that was free a moment ago: bind port 0 and read what the kernel picked.
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = -1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// Whether `port` can be bound on the loopback address now.
inline bool port_is_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return free;
}

// The MASTER_PORT of a launched job: free, chosen at random below the kernel's ephemeral range.
// Each test of the job binds it again, and in the gap between two tests a port of that range can
// be handed to anything that binds port 0 or connects out (another job's free_port() or Gloo
// listener): its rank 0 then cannot serve the store while its other ranks meet another job's
// (failures seen as "rank 0 cannot serve the rendezvous store" and peers closing connections).
// Only another launcher picks from below the range, at random too.
inline int rendezvous_port() {
  int ephemeral_low = 32768, ephemeral_high = 60999;
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%d %d", &ephemeral_low, &ephemeral_high) != 2) ephemeral_low = 32768;
    std::fclose(range);
  }
  constexpr int kLowest = 10000;
  if (ephemeral_low - kLowest >= 1000) {
    std::random_device seed;
    std::uniform_int_distribution<int> pick(kLowest, ephemeral_low - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int port = pick(seed);
      if (port_is_free(port)) return port;
    }
  }
  return free_port();
}

// Whether this process is one rank of a launched job.
inline bool in_rank_process() { return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr; }

// Starts world_size copies of argv (argv[0] is the program), waits for them, and returns 0 when
// every rank exits 0. After `deadline` the remaining ranks are killed and the job fails.
inline int launch_ranks(const std::vector<std::string>& argv, int world_size, std::chrono::seconds deadline) {
  int port = rendezvous_port();
  if (port < 0) {
    std::perror("launch_ranks: no free port");
    return 1;
  }
  pid_t launcher = getpid();
  std::vector<pid_t> children;
  for (int rank = 0; rank < world_size; ++rank) {
    pid_t child = fork();
    if (child < 0) {
      std::perror("launch_ranks: fork");
      for (pid_t started : children) kill(started, SIGKILL);
      return 1;
    }
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);  // the launcher died before prctl took effect
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      std::vector<char*> arguments;
      for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
      arguments.push_back(nullptr);
      execv("/proc/self/exe", arguments.data());
      std::perror("launch_ranks: execv");
      _exit(127);
    }
    children.push_back(child);
  }
  int failures = 0;
  size_t running = children.size();
  auto give_up_at = std::chrono::steady_clock::now() + deadline;
  while (running > 0) {
    int status = 0;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --running;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failures;
        std::fprintf(stderr, "launch_ranks: a rank (pid %d) %s %d\n", done, WIFEXITED(status) ? "exited with" : "was killed by signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > give_up_at) {
      std::fprintf(stderr, "launch_ranks: the job ran past %lld s; killing every rank\n", static_cast<long long>(deadline.count()));
      for (pid_t child : children) kill(child, SIGKILL);
      while (waitpid(-1, nullptr, 0) > 0) {
      }
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failures == 0 ? 0 : 1;
}

// Launcher mode: when argv holds --ranks=N (and this is not already a rank), runs the same
// program without that flag as N ranks and returns the job's exit code; otherwise nullopt.
// --launch-timeout=S bounds the job (default 50 s).
inline std::optional<int> launch_if_asked(int argc, char** argv) {
  if (in_rank_process()) return std::nullopt;
  int world_size = 0;
  long deadline_s = 50;
  std::vector<std::string> rank_argv;
  for (int i = 0; i < argc; ++i) {
    std::string argument = argv[i];
    if (argument.rfind("--ranks=", 0) == 0) {
      world_size = std::atoi(argument.c_str() + 8);
    } else if (argument.rfind("--launch-timeout=", 0) == 0) {
      deadline_s = std::atol(argument.c_str() + 17);
    } else {
      rank_argv.push_back(argument);
    }
  }
  if (world_size <= 0) return std::nullopt;
  return launch_ranks(rank_argv, world_size, std::chrono::seconds(deadline_s));
}

}  // namespace flow::testing

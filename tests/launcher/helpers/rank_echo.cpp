// rank_echo: the program flow_run's tests launch. Each flag asks for one behaviour; they run in
// the order listed here:
//   --print-env             prints NAME=value for each variable of the launcher's contract
//   --print-pid             prints pid=N
//   --report-signals        on SIGINT or SIGTERM: prints "rank R got SIGTERM" and exits 0
//   --ignore-sigterm        ignores SIGTERM (for the SIGKILL grace period)
//   --lines N               prints N lines, each written in two pieces
//   --rendezvous            rank 0 accepts a connection from every other rank on MASTER_PORT
//   --fail-rank R --exit-code C   rank R exits with C
//   --kill-self-rank R      rank R kills itself with SIGKILL
//   --sleep S               prints "rank R ready", then sleeps S seconds
//   --partial TEXT          writes TEXT with no newline before exiting 0
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int rank = -1;

extern "C" void report_signal_and_exit(int signal) {
  char message[64];
  const int length = snprintf(message, sizeof(message), "rank %d got SIG%s\n", rank, sigabbrev_np(signal));
  [[maybe_unused]] const ssize_t written = write(STDOUT_FILENO, message, static_cast<size_t>(length));
  _exit(0);
}

int environment_int(const char* name) {
  const char* value = getenv(name);
  return value != nullptr ? atoi(value) : -1;
}

void print_environment() {
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                           "GROUP_RANK", "OMP_NUM_THREADS", "FLOW_RDZV_ID", "FLOW_LINE_BUFFERED"}) {
    const char* value = getenv(name);
    printf("%s=%s\n", name, value != nullptr ? value : "<unset>");
  }
  fflush(stdout);
}

// Two writes per line, flushed apart, so the launcher sees (and must not split) partial lines.
void print_lines(int count) {
  for (int line = 0; line < count; ++line) {
    printf("line %d part-a", line);
    fflush(stdout);
    printf(" part-b\n");
    fflush(stdout);
    fprintf(stderr, "error line %d\n", line);
  }
}

// Rank 0 listens on MASTER_ADDR:MASTER_PORT; the others connect (retrying for up to 10 s).
bool rendezvous() {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(environment_int("MASTER_PORT")));
  inet_pton(AF_INET, getenv("MASTER_ADDR"), &address.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (rank == 0) {
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 64) != 0) {
      perror("rank 0 cannot listen on MASTER_PORT");
      return false;
    }
    for (int peer = 1; peer < environment_int("WORLD_SIZE"); ++peer) close(accept(fd, nullptr, nullptr));
    printf("rendezvous done on port %d\n", environment_int("MASTER_PORT"));
    fflush(stdout);
  } else {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  close(fd);
  return true;
}

struct Behaviour {
  bool print_env = false;
  bool print_pid = false;
  bool report_signals = false;
  bool ignore_sigterm = false;
  bool rendezvous = false;
  int lines = 0;
  int fail_rank = -1;
  int exit_code = 1;
  int kill_self_rank = -1;
  double sleep_seconds = 0;
  const char* partial = nullptr;
};

// The flags; nothing when one is unknown.
bool parse(int argc, char** argv, Behaviour& behaviour) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (flag == "--print-env") {
      behaviour.print_env = true;
    } else if (flag == "--print-pid") {
      behaviour.print_pid = true;
    } else if (flag == "--report-signals") {
      behaviour.report_signals = true;
    } else if (flag == "--ignore-sigterm") {
      behaviour.ignore_sigterm = true;
    } else if (flag == "--rendezvous") {
      behaviour.rendezvous = true;
    } else if (flag == "--lines") {
      behaviour.lines = atoi(value());
    } else if (flag == "--fail-rank") {
      behaviour.fail_rank = atoi(value());
    } else if (flag == "--exit-code") {
      behaviour.exit_code = atoi(value());
    } else if (flag == "--kill-self-rank") {
      behaviour.kill_self_rank = atoi(value());
    } else if (flag == "--sleep") {
      behaviour.sleep_seconds = atof(value());
    } else if (flag == "--partial") {
      behaviour.partial = value();
    } else {
      fprintf(stderr, "rank_echo: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  rank = environment_int("RANK");
  Behaviour behaviour;
  if (!parse(argc, argv, behaviour)) return 64;
  if (behaviour.print_env) print_environment();
  if (behaviour.print_pid) {
    printf("pid=%d\n", static_cast<int>(getpid()));
    fflush(stdout);
  }
  if (behaviour.report_signals) {
    signal(SIGTERM, report_signal_and_exit);
    signal(SIGINT, report_signal_and_exit);
  }
  if (behaviour.ignore_sigterm) signal(SIGTERM, SIG_IGN);
  print_lines(behaviour.lines);
  if (behaviour.rendezvous && !rendezvous()) return 65;
  if (rank == behaviour.fail_rank) return behaviour.exit_code;
  if (rank == behaviour.kill_self_rank) raise(SIGKILL);
  if (behaviour.sleep_seconds > 0) {
    printf("rank %d ready\n", rank);
    fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(behaviour.sleep_seconds));
  }
  if (behaviour.partial != nullptr) fputs(behaviour.partial, stdout);
  return 0;
}

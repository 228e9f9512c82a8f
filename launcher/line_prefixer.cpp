#include "launcher/line_prefixer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace flow::launcher {

namespace {
// A rank printing megabytes without a newline (a progress bar drawn with '\r') must not grow
// flow_run's memory without bound: that much is written as a line of its own.
constexpr size_t kLongestLine = 1 << 20;
}  // namespace

void write_fully(int fd, std::string_view data) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      // flow_run's stdout may be a non-blocking descriptor it inherited.
      pollfd writable{fd, POLLOUT, 0};
      poll(&writable, 1, 100);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;
    }
  }
}

LinePrefixer::LinePrefixer(int source_fd, int console_fd, std::string prefix, int log_fd)
    : source_fd_(source_fd), console_fd_(console_fd), log_fd_(log_fd), prefix_(std::move(prefix)) {}

LinePrefixer::LinePrefixer(LinePrefixer&& other) noexcept
    : source_fd_(std::exchange(other.source_fd_, -1)),
      console_fd_(other.console_fd_),
      log_fd_(std::exchange(other.log_fd_, -1)),
      prefix_(std::move(other.prefix_)),
      pending_(std::move(other.pending_)) {}

LinePrefixer::~LinePrefixer() {
  close_source();
  if (log_fd_ >= 0) close(log_fd_);
}

void LinePrefixer::read_available() {
  bool at_end = false;
  // One read per call keeps a chatty rank from starving the others in the poll loop.
  read_once(at_end);
  write_complete_lines();
  if (at_end) {
    write_unfinished_line();
    close_source();
  }
}

void LinePrefixer::drain_and_close() {
  bool at_end = false;
  while (open() && read_once(at_end)) write_complete_lines();
  write_complete_lines();
  write_unfinished_line();
  close_source();
}

bool LinePrefixer::read_once(bool& at_end) {
  if (!open()) return false;
  char buffer[65536];
  ssize_t n;
  do {
    n = read(source_fd_, buffer, sizeof(buffer));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    // The log gets what the rank wrote as soon as it is read, even an unfinished line.
    if (log_fd_ >= 0) write_fully(log_fd_, std::string_view(buffer, static_cast<size_t>(n)));
    if (console_fd_ >= 0) pending_.append(buffer, static_cast<size_t>(n));
    return true;
  }
  // 0: end of stream; EAGAIN: nothing more now; any other error ends the stream as well.
  at_end = n == 0 || errno != EAGAIN;
  return false;
}

void LinePrefixer::write_complete_lines() {
  std::string lines;
  size_t line_start = 0;
  for (size_t newline; (newline = pending_.find('\n', line_start)) != std::string::npos; line_start = newline + 1) {
    lines += prefix_;
    lines.append(pending_, line_start, newline + 1 - line_start);
  }
  pending_.erase(0, line_start);
  if (pending_.size() >= kLongestLine) {
    lines += prefix_ + pending_ + '\n';
    pending_.clear();
  }
  if (!lines.empty()) write_fully(console_fd_, lines);
}

void LinePrefixer::write_unfinished_line() {
  if (pending_.empty()) return;
  write_fully(console_fd_, prefix_ + pending_ + '\n');
  pending_.clear();
}

void LinePrefixer::close_source() {
  if (source_fd_ >= 0) close(std::exchange(source_fd_, -1));
}

}  // namespace flow::launcher

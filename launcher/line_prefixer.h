#pragma once
// One output stream of one rank (its stdout or its stderr, read from a pipe) copied to flow_run's
// own, every line starting with the rank's prefix, and/or to the rank's log file as written. Only
// whole lines reach the console, each line in one write, so the lines of different ranks never mix.
#include <string>
#include <string_view>

namespace flow::launcher {

class LinePrefixer {
 public:
  // Reads source (a non-blocking pipe, owned and closed here). Writes prefixed lines to
  // console_fd (not owned; -1: none) and the bytes read, unchanged, to log_fd (owned; -1: none).
  LinePrefixer(int source_fd, int console_fd, std::string prefix, int log_fd = -1);
  LinePrefixer(const LinePrefixer&) = delete;
  LinePrefixer& operator=(const LinePrefixer&) = delete;
  LinePrefixer(LinePrefixer&& other) noexcept;
  LinePrefixer& operator=(LinePrefixer&&) = delete;
  ~LinePrefixer();

  int source_fd() const { return source_fd_; }
  bool open() const { return source_fd_ >= 0; }

  // Copies the whole lines readable now; at end of stream, also the unfinished last line, and
  // closes the source.
  void read_available();
  // After the rank exited: what it wrote is all in the pipe; copies it, ends a last unfinished
  // line with a newline and closes the source. (A process the rank started may still hold the
  // pipe open; what it writes later is not copied.)
  void drain_and_close();

 private:
  // Reads once; false at end of stream or when nothing more is readable now.
  bool read_once(bool& at_end);
  void write_complete_lines();
  void write_unfinished_line();
  void close_source();

  int source_fd_;
  int console_fd_;
  int log_fd_;
  std::string prefix_;
  std::string pending_;  // read, not yet written: no newline in it
};

// Writes all of data to fd, retrying short and interrupted writes; gives up silently when fd is
// gone (a closed pipe), as a log reader going away must not stop the job.
void write_fully(int fd, std::string_view data);

}  // namespace flow::launcher

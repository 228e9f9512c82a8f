#pragma once
// Command-line parsing shared by flow's tools, on CLI11: `--flag value` and `--flag=value`,
// `--help`, and typed checks whose errors name the flag. A usage error prints the error and a
// pointer to --help on stderr and exits with status 2, as POSIX tools do.
#include <CLI/CLI.hpp>

#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

namespace flow::cli {

// Parses argv into app. Returns nothing when the tool should go on, else the status to exit
// with: 0 after --help, 2 after a usage error.
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
}

namespace detail {
// The value must parse as a T and satisfy holds(value); `rule` says what it must be.
template <typename T, typename Holds>
CLI::Validator number(Holds holds, const std::string& rule, const std::string& description) {
  return CLI::Validator(
      [holds, rule](std::string& text) -> std::string {
        T value{};
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!holds(value)) return "must be " + rule + ", got " + text;
        return "";
      },
      description);
}
}  // namespace detail

// An integer no smaller than minimum: `--batch -3` and `--batch abc` fail with "--batch: ...".
template <typename T>
CLI::Validator at_least(T minimum) {
  static_assert(std::is_integral_v<T>);
  return detail::number<T>([minimum](T value) { return value >= minimum; }, "at least " + std::to_string(minimum),
                           ">=" + std::to_string(minimum));
}

// A number greater than 0 and at most maximum (a rate, a duration).
inline CLI::Validator positive(double maximum = std::numeric_limits<double>::max()) {
  std::ostringstream rule;
  rule << "greater than 0";
  if (maximum < std::numeric_limits<double>::max()) rule << " and at most " << maximum;
  return detail::number<double>([maximum](double value) { return value > 0 && value <= maximum; }, rule.str(), ">0");
}

// The value must be HOST:PORT with a port in 1..65535 (a Prometheus endpoint, a listening address).
inline CLI::Validator host_port() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const size_t colon = text.rfind(':');
        int port = 0;
        if (colon == std::string::npos || colon == 0 || !CLI::detail::lexical_cast(text.substr(colon + 1), port) ||
            port < 1 || port > 65535) {
          return "'" + text + "' is not HOST:PORT";
        }
        return "";
      },
      "");
}

}  // namespace flow::cli

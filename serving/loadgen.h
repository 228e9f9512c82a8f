#pragma once
// Load generation against a KServe v2 server: fixed concurrency (closed loop, N requests always
// outstanding) or fixed rate (open loop, requests started on a schedule whatever the latency).
// While the server does not answer (UNAVAILABLE: down, unreachable or shutting down) it backs
// off instead of failing as fast as the machine can: one probe at a time, after a delay that
// doubles from backoff_initial up to backoff_max, and full speed again at the first answer.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "serving/client.h"

namespace flow::serving {

struct LoadOptions {
  int concurrency = 1;  // fixed-concurrency mode: requests kept outstanding
  double rate = 0;      // > 0: fixed-rate mode, requests started per second (concurrency unused)
  // When to stop sending: after `requests` requests, or after `duration` when requests is 0.
  int64_t requests = 0;
  std::chrono::milliseconds duration{0};
  std::chrono::milliseconds backoff_initial{1};
  std::chrono::milliseconds backoff_max{500};
};

struct LoadReport {
  int64_t sent = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> failures;  // by status code name (or "MISMATCH" from the check)
  std::string first_failure;
  double seconds = 0;       // the whole run
  double down_seconds = 0;  // of which the server did not answer (from a failure to the next answer)
  double throughput = 0;    // succeeded per second of up time (seconds - down_seconds)
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0;  // of the successful requests
};

// Builds request number `seq` (0, 1, ...).
using RequestMaker = std::function<inference::ModelInferRequest(int64_t seq)>;
// Checks the response to request `seq`: "" when right, else what is wrong (counted a failure).
using ResponseCheck = std::function<std::string(int64_t seq, const inference::ModelInferResponse& response)>;

// Sends requests until the stop condition, waits for every answer, and reports.
LoadReport run_load(Client& client, const LoadOptions& options, const RequestMaker& make,
                    const ResponseCheck& check = nullptr);

// A few lines for people.
std::string format_report(const LoadReport& report);

}  // namespace flow::serving

#pragma once
// Reading a Prometheus text endpoint (flow_serve's or Triton's metrics port).
#include <map>
#include <string>

namespace flow::serving {

// The body of GET http://<host>:<port>/metrics. Throws flow::Error when it cannot be fetched.
std::string fetch_metrics(const std::string& host, int port);

// The sum of the samples of metric `name` whose labels include every entry of `labels`; 0 when
// there is none.
double metric_value(const std::string& text, const std::string& name,
                    const std::map<std::string, std::string>& labels = {});

}  // namespace flow::serving

#pragma once
// The model repository: <root>/<model>/<version>/ holds an export directory (version: a positive
// integer) and <root>/<model>/config.pbtxt an optional config. The newest version that loads is
// served. poll() rescans: a newer version is loaded first and then swapped in, while requests
// already queued on the old one finish; a version that fails to load leaves the old one serving
// and is retried only once its files change.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serving/metrics.h"
#include "serving/served_model.h"

namespace flow::serving {

class ModelRepository {
 public:
  // Throws flow::Error when root is not a directory. Loads nothing until poll().
  ModelRepository(std::string root, Metrics& metrics);

  // Brings the served models in line with the directory: loads new models and newer versions,
  // unloads models (and falls back from versions) whose directories are gone. Load failures are
  // logged. Returns the number of versions that failed to load in this call.
  int poll();

  // The served version of a model; `version` empty or equal to it. Throws
  // ServingError(NOT_FOUND) for an unknown model or a version not served.
  std::shared_ptr<ServedModel> get(const std::string& name, const std::string& version) const;
  std::vector<std::shared_ptr<ServedModel>> models() const;
  // Unloads every model, finishing their queued requests.
  void clear();

 private:
  // Loads the newest loadable version of one model; returns the failures.
  int poll_model(const std::string& name);
  void serve(const std::string& name, std::shared_ptr<ServedModel> model);

  const std::string root_;
  Metrics& metrics_;
  mutable std::mutex served_mutex_;
  std::map<std::string, std::shared_ptr<ServedModel>> served_;
  std::mutex poll_mutex_;  // one poll at a time
  // "<model>/<version>" -> what its files looked like when it failed to load.
  std::map<std::string, std::string> failed_;
};

}  // namespace flow::serving

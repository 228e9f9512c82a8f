#pragma once
// The model repository: <root>/<model>/<version>/ holds an export directory (version: a positive
// integer) and <root>/<model>/config.pbtxt an optional config whose version_policy picks the
// versions served (default: all that load). A request that names no version gets the newest one
// served. poll() rescans: new versions are loaded before they are swapped in; versions that leave
// the policy or the disk are unloaded once their queued requests finish; a version that fails to
// load leaves the others serving and is retried only once its files (or the config) change.
//
// Under explicit model control (Triton's --model-control-mode explicit) only the models load()
// named are served, and poll() rescans only those; load() and unload() are refused otherwise.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "serving/metrics.h"
#include "serving/served_model.h"

namespace flow::serving {

// The model directories of a repository (hidden ones, starting with '.', left out), by name.
std::set<std::string> model_directories(const std::string& root);

class ModelRepository {
 public:
  // Throws flow::Error when root is not a directory. Loads nothing until poll(). With
  // `explicit_models`, model control is explicit and those are the models served at first.
  ModelRepository(std::string root, Metrics& metrics, std::optional<std::set<std::string>> explicit_models = std::nullopt);

  // Brings the served models in line with the directory and the configs: loads new models and
  // versions, unloads what is gone. Load failures are logged. Returns the number of versions (or
  // configs) that failed to load in this call; a failure already seen with the same files is not
  // retried and not counted again.
  int poll();

  // A served version of a model: the newest when `version` is empty. Throws
  // ServingError(NOT_FOUND) for an unknown model or a version not served.
  std::shared_ptr<ServedModel> get(const std::string& name, const std::string& version) const;
  // The served versions of a model, oldest first (empty for an unknown model).
  std::vector<std::string> versions(const std::string& name) const;
  // Every served version of every model.
  std::vector<std::shared_ptr<ServedModel>> models() const;
  // Unloads every model, finishing their queued requests.
  void clear();

  // The repository index: every model directory, each served version READY, each version that
  // failed to load and a model with no version served UNAVAILABLE with why; by name, then
  // version. `ready_only`: the READY entries.
  struct IndexEntry {
    std::string name, version, state, reason;
  };
  std::vector<IndexEntry> index(bool ready_only) const;
  // Explicit model control: serves the model's versions from now on (a model served already is
  // reloaded: its config and versions read again, failed versions retried). Throws ServingError:
  // FAILED_PRECONDITION without explicit control, NOT_FOUND for no such model directory,
  // INVALID_ARGUMENT with the load errors when no version loads.
  void load(const std::string& name);
  // Explicit model control: stops serving the model (its queued requests finish). Throws
  // ServingError(FAILED_PRECONDITION) without explicit control.
  void unload(const std::string& name);
  bool explicit_control() const { return explicit_models_.has_value(); }
  // Throws ServingError(NOT_FOUND) unless `name` is empty or the repository directory's name
  // (the repository_name of the repository extension's calls).
  void check_repository_name(const std::string& name) const;

 private:
  // Newest first: begin() is what an unversioned request gets.
  using Versions = std::map<int64_t, std::shared_ptr<ServedModel>, std::greater<>>;

  // Loads what the model's policy asks for and is not loaded yet, then swaps in the new set;
  // returns the failures.
  int poll_model(const std::string& name);
  // Serves `versions` for the model (none: unloads it).
  void serve(const std::string& name, Versions versions);
  // Whether `key` already failed to load with its files looking like `print`.
  bool known_failure(const std::string& key, const std::string& print) const;
  void check_explicit(const char* call) const;
  // Remembers that `key` failed with its files looking like `print`, and why; an empty reason
  // forgets it.
  void record_failure(const std::string& key, const std::string& print, const std::string& reason);

  const std::string root_;
  Metrics& metrics_;
  mutable std::mutex served_mutex_;
  std::map<std::string, Versions> served_;
  std::mutex poll_mutex_;  // one poll at a time
  // "<model>/<version>" or "<model>/config.pbtxt" -> what its files looked like when it failed,
  // and why it failed. Under poll_mutex_, and served_mutex_ too for writes (index() reads it).
  std::map<std::string, std::string> failed_;
  std::map<std::string, std::string> failure_reasons_;
  // Explicit model control: the models to serve (under poll_mutex_).
  std::optional<std::set<std::string>> explicit_models_;
};

}  // namespace flow::serving

#include "serving/model_repository.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "serving/status.h"

namespace flow::serving {
namespace fs = std::filesystem;
namespace {

// The version directories of a model, newest first.
std::vector<int64_t> versions_on_disk(const fs::path& model_dir) {
  std::vector<int64_t> versions;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(model_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.empty() || name.size() > 18 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    if (const int64_t version = std::stoll(name); version > 0) versions.push_back(version);
  }
  std::sort(versions.begin(), versions.end(), std::greater<>());
  return versions;
}

// Changes whenever the file is added, removed, resized or rewritten.
std::string file_fingerprint(const fs::directory_entry& entry) {
  std::error_code error;
  if (!entry.is_regular_file(error)) return "";
  return entry.path().string() + ":" + std::to_string(entry.file_size(error)) + ":" +
         std::to_string(entry.last_write_time(error).time_since_epoch().count()) + ";";
}

// Changes whenever a file in the directory is added, removed, resized or rewritten.
std::string directory_fingerprint(const fs::path& dir) {
  std::string print;
  std::error_code error;
  for (const auto& entry : fs::recursive_directory_iterator(dir, error)) print += file_fingerprint(entry);
  return print;
}

// The versions on disk the policy asks for, newest first, and how many of them to serve.
std::pair<std::vector<int64_t>, size_t> wanted_versions(const config::ModelVersionPolicy& policy,
                                                        std::vector<int64_t> on_disk) {
  if (policy.has_specific()) {
    const auto& listed = policy.specific().versions();
    std::erase_if(on_disk, [&](int64_t version) { return std::find(listed.begin(), listed.end(), version) == listed.end(); });
  }
  const size_t limit = policy.has_latest() ? policy.latest().num_versions() : std::numeric_limits<size_t>::max();
  return {std::move(on_disk), limit};
}

template <typename Versions>
std::vector<std::string> version_strings(const Versions& versions) {
  std::vector<std::string> strings;
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) strings.push_back(it->second->version_string());
  return strings;
}

std::string joined(const std::vector<std::string>& strings) {
  std::string text;
  for (const auto& string : strings) text += (text.empty() ? "" : ", ") + string;
  return text;
}

}  // namespace

std::set<std::string> model_directories(const std::string& root) {
  std::set<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && !name.starts_with(".")) names.insert(name);
  }
  return names;
}

ModelRepository::ModelRepository(std::string root, Metrics& metrics, std::optional<std::set<std::string>> explicit_models)
    : root_(std::move(root)), metrics_(metrics), explicit_models_(std::move(explicit_models)) {
  if (!fs::is_directory(root_)) fail("serving", "model repository ", root_, " is not a directory");
}

int ModelRepository::poll() {
  std::lock_guard poll_lock(poll_mutex_);
  int failures = 0;
  std::set<std::string> names = model_directories(root_);
  if (explicit_models_) std::erase_if(names, [this](const std::string& name) { return !explicit_models_->contains(name); });
  for (const auto& name : names) failures += poll_model(name);

  std::vector<std::string> removed;
  {
    std::lock_guard lock(served_mutex_);
    for (const auto& [name, versions] : served_) {
      if (!names.contains(name)) removed.push_back(name);
    }
  }
  for (const auto& name : removed) serve(name, {});
  return failures;
}

void ModelRepository::record_failure(const std::string& key, const std::string& print, const std::string& reason) {
  std::lock_guard lock(served_mutex_);
  if (reason.empty()) {
    failed_.erase(key);
    failure_reasons_.erase(key);
  } else {
    failed_[key] = print;
    failure_reasons_[key] = reason;
  }
}

bool ModelRepository::known_failure(const std::string& key, const std::string& print) const {
  const auto it = failed_.find(key);
  return it != failed_.end() && it->second == print;
}

int ModelRepository::poll_model(const std::string& name) {
  const fs::path model_dir = fs::path(root_) / name;
  Versions current;
  {
    std::lock_guard lock(served_mutex_);
    if (auto it = served_.find(name); it != served_.end()) current = it->second;
  }
  const std::string still_serving =
      current.empty() ? "" : " (still serving version(s) " + joined(version_strings(current)) + ")";

  const std::string config_key = name + "/" + kModelConfigFile;
  const std::string config_print = file_fingerprint(fs::directory_entry(model_dir / kModelConfigFile));
  config::ModelConfig config;
  try {
    config = read_model_config(model_dir.string());
    record_failure(config_key, "", "");
  } catch (const std::exception& error) {
    if (known_failure(config_key, config_print)) return 0;
    LOG(ERROR) << "[serving] model '" << name << "': " << error.what() << still_serving;
    record_failure(config_key, config_print, error.what());
    return 1;
  }

  int failures = 0;
  Versions next;
  const auto [wanted, limit] = wanted_versions(config.version_policy(), versions_on_disk(model_dir));
  for (int64_t version : wanted) {
    if (next.size() == limit) break;
    if (auto it = current.find(version); it != current.end()) {
      next.insert(*it);
      continue;
    }
    const fs::path version_dir = model_dir / std::to_string(version);
    const std::string key = name + "/" + std::to_string(version);
    // A version loads with the model's config, so a changed config is worth another try.
    const std::string print = directory_fingerprint(version_dir) + config_print;
    if (known_failure(key, print)) continue;
    try {
      next.emplace(version, ServedModel::load(name, version, version_dir.string(), config, metrics_));
      record_failure(key, "", "");
    } catch (const std::exception& error) {
      LOG(ERROR) << "[serving] model '" << name << "' version " << version << " failed to load" << still_serving
                 << ": " << error.what();
      record_failure(key, print, error.what());
      ++failures;
    }
  }
  serve(name, std::move(next));
  return failures;
}

void ModelRepository::serve(const std::string& name, Versions versions) {
  Versions old;
  {
    std::lock_guard lock(served_mutex_);
    Versions& served = served_[name];
    for (const auto& [version, model] : versions) {
      if (!served.contains(version)) LOG(INFO) << "[serving] serving " << model->label();
    }
    for (const auto& [version, model] : served) {
      if (!versions.contains(version)) LOG(INFO) << "[serving] unloading " << model->label();
    }
    old = std::exchange(served, std::move(versions));
    if (served.empty()) served_.erase(name);
  }
  // Outside the lock: an unloaded version finishes its queued requests when its last user lets go.
  old.clear();
}

std::shared_ptr<ServedModel> ModelRepository::get(const std::string& name, const std::string& version) const {
  std::lock_guard lock(served_mutex_);
  const auto it = served_.find(name);
  if (it == served_.end()) fail_status(grpc::StatusCode::NOT_FOUND, "model '", name, "' is not in the repository");
  const Versions& versions = it->second;
  if (version.empty()) return versions.begin()->second;
  for (const auto& [number, model] : versions) {
    if (model->version_string() == version) return model;
  }
  fail_status(grpc::StatusCode::NOT_FOUND, "model '", name, "' has no version '", version, "' (serving version(s) ",
              joined(version_strings(versions)), ")");
}

std::vector<std::string> ModelRepository::versions(const std::string& name) const {
  std::lock_guard lock(served_mutex_);
  const auto it = served_.find(name);
  return it == served_.end() ? std::vector<std::string>{} : version_strings(it->second);
}

std::vector<std::shared_ptr<ServedModel>> ModelRepository::models() const {
  std::lock_guard lock(served_mutex_);
  std::vector<std::shared_ptr<ServedModel>> models;
  for (const auto& [name, versions] : served_) {
    for (const auto& [version, model] : versions) models.push_back(model);
  }
  return models;
}

void ModelRepository::clear() {
  std::map<std::string, Versions> old;
  {
    std::lock_guard lock(served_mutex_);
    old.swap(served_);
  }
}

void ModelRepository::check_repository_name(const std::string& name) const {
  if (!name.empty() && name != fs::path(root_).filename().string()) {
    fail_status(grpc::StatusCode::NOT_FOUND, "no repository '", name, "' (this server has '", fs::path(root_).filename().string(), "')");
  }
}

void ModelRepository::check_explicit(const char* call) const {
  if (!explicit_models_) {
    fail_status(grpc::StatusCode::FAILED_PRECONDITION, call, " needs explicit model control (flow_serve --model-control-mode explicit)");
  }
}

void ModelRepository::load(const std::string& name) {
  std::lock_guard poll_lock(poll_mutex_);
  check_explicit("loading a model");
  std::error_code error;
  if (name.empty() || name.starts_with(".") || name.find('/') != std::string::npos || !fs::is_directory(fs::path(root_) / name, error)) {
    fail_status(grpc::StatusCode::NOT_FOUND, "no model '", name, "' in the repository");
  }
  explicit_models_->insert(name);
  {
    // An explicit load retries what failed before, changed or not.
    std::lock_guard lock(served_mutex_);
    std::erase_if(failed_, [&](const auto& entry) { return entry.first.starts_with(name + "/"); });
  }
  poll_model(name);
  if (!versions(name).empty()) return;
  std::string reasons;
  {
    std::lock_guard lock(served_mutex_);
    for (const auto& [key, reason] : failure_reasons_) {
      if (key.starts_with(name + "/")) reasons += (reasons.empty() ? "" : "; ") + key + ": " + reason;
    }
  }
  fail_status(grpc::StatusCode::INVALID_ARGUMENT, "model '", name, "' did not load: ", reasons.empty() ? "no version on disk" : reasons);
}

void ModelRepository::unload(const std::string& name) {
  std::lock_guard poll_lock(poll_mutex_);
  check_explicit("unloading a model");
  explicit_models_->erase(name);
  serve(name, {});
}

std::vector<ModelRepository::IndexEntry> ModelRepository::index(bool ready_only) const {
  std::set<std::string> names = model_directories(root_);
  std::lock_guard lock(served_mutex_);
  for (const auto& [name, versions] : served_) names.insert(name);
  std::vector<IndexEntry> entries;
  for (const std::string& name : names) {
    std::map<int64_t, IndexEntry> by_version;
    if (const auto served = served_.find(name); served != served_.end()) {
      for (const auto& [version, model] : served->second) by_version[version] = {name, model->version_string(), "READY", ""};
    }
    std::string model_reason;
    for (const auto& [key, reason] : failure_reasons_) {
      if (!key.starts_with(name + "/")) continue;
      const std::string what = key.substr(name.size() + 1);
      if (what == kModelConfigFile) {
        model_reason = what + ": " + reason;
      } else if (!ready_only) {
        by_version.try_emplace(std::stoll(what), IndexEntry{name, what, "UNAVAILABLE", reason});
      }
    }
    for (auto& [version, entry] : by_version) {
      if (!ready_only || entry.state == "READY") entries.push_back(std::move(entry));
    }
    const bool any_served = served_.contains(name);
    if (!any_served && !ready_only && by_version.empty()) {
      entries.push_back({name, "", "UNAVAILABLE", model_reason.empty() ? "unloaded" : model_reason});
    }
  }
  return entries;
}

}  // namespace flow::serving

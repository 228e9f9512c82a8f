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

ModelRepository::ModelRepository(std::string root, Metrics& metrics) : root_(std::move(root)), metrics_(metrics) {
  if (!fs::is_directory(root_)) fail("serving", "model repository ", root_, " is not a directory");
}

int ModelRepository::poll() {
  std::lock_guard poll_lock(poll_mutex_);
  int failures = 0;
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && !name.starts_with(".")) names.push_back(name);
  }
  for (const auto& name : names) failures += poll_model(name);

  std::vector<std::string> removed;
  {
    std::lock_guard lock(served_mutex_);
    for (const auto& [name, versions] : served_) {
      if (std::find(names.begin(), names.end(), name) == names.end()) removed.push_back(name);
    }
  }
  for (const auto& name : removed) serve(name, {});
  return failures;
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
    failed_.erase(config_key);
  } catch (const std::exception& error) {
    if (known_failure(config_key, config_print)) return 0;
    LOG(ERROR) << "[serving] model '" << name << "': " << error.what() << still_serving;
    failed_[config_key] = config_print;
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
      failed_.erase(key);
    } catch (const std::exception& error) {
      LOG(ERROR) << "[serving] model '" << name << "' version " << version << " failed to load" << still_serving
                 << ": " << error.what();
      failed_[key] = print;
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

}  // namespace flow::serving

#include "serving/model_repository.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <functional>

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

// Changes whenever a file in the directory is added, removed, resized or rewritten.
std::string fingerprint(const fs::path& dir) {
  std::string print;
  std::error_code error;
  for (const auto& entry : fs::recursive_directory_iterator(dir, error)) {
    if (!entry.is_regular_file()) continue;
    print += entry.path().string() + ":" + std::to_string(entry.file_size()) + ":" +
             std::to_string(entry.last_write_time().time_since_epoch().count()) + ";";
  }
  return print;
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
    for (const auto& [name, model] : served_) {
      if (std::find(names.begin(), names.end(), name) == names.end()) removed.push_back(name);
    }
  }
  for (const auto& name : removed) serve(name, nullptr);
  return failures;
}

int ModelRepository::poll_model(const std::string& name) {
  const fs::path model_dir = fs::path(root_) / name;
  std::shared_ptr<ServedModel> current;
  {
    std::lock_guard lock(served_mutex_);
    if (auto it = served_.find(name); it != served_.end()) current = it->second;
  }
  int failures = 0;
  const std::vector<int64_t> versions = versions_on_disk(model_dir);
  for (int64_t version : versions) {
    if (current && version == current->version()) return failures;
    const fs::path version_dir = model_dir / std::to_string(version);
    const std::string key = name + "/" + std::to_string(version);
    const std::string print = fingerprint(version_dir);
    if (auto it = failed_.find(key); it != failed_.end() && it->second == print) continue;
    try {
      serve(name, ServedModel::load(name, version, version_dir.string(), read_model_config(model_dir.string()), metrics_));
      failed_.erase(key);
      return failures;
    } catch (const std::exception& error) {
      LOG(ERROR) << "[serving] model '" << name << "' version " << version << " failed to load"
                 << (current ? " (version " + current->version_string() + " keeps serving)" : "") << ": "
                 << error.what();
      failed_[key] = print;
      ++failures;
    }
  }
  // No version on disk loads and the served one is gone from disk: stop serving the model.
  if (current) serve(name, nullptr);
  return failures;
}

void ModelRepository::serve(const std::string& name, std::shared_ptr<ServedModel> model) {
  std::shared_ptr<ServedModel> old;
  {
    std::lock_guard lock(served_mutex_);
    if (model) {
      LOG(INFO) << "[serving] serving " << model->label();
      old = std::exchange(served_[name], std::move(model));
    } else if (auto it = served_.find(name); it != served_.end()) {
      LOG(INFO) << "[serving] unloading " << it->second->label();
      old = std::move(it->second);
      served_.erase(it);
    }
  }
  // Outside the lock: the old version finishes its queued requests when its last user lets go.
  old.reset();
}

std::shared_ptr<ServedModel> ModelRepository::get(const std::string& name, const std::string& version) const {
  std::lock_guard lock(served_mutex_);
  const auto it = served_.find(name);
  if (it == served_.end()) fail_status(grpc::StatusCode::NOT_FOUND, "model '", name, "' is not in the repository");
  if (!version.empty() && version != it->second->version_string()) {
    fail_status(grpc::StatusCode::NOT_FOUND, "model '", name, "' has no version '", version, "' (serving version ",
                it->second->version_string(), ")");
  }
  return it->second;
}

std::vector<std::shared_ptr<ServedModel>> ModelRepository::models() const {
  std::lock_guard lock(served_mutex_);
  std::vector<std::shared_ptr<ServedModel>> models;
  for (const auto& [name, model] : served_) models.push_back(model);
  return models;
}

void ModelRepository::clear() {
  std::map<std::string, std::shared_ptr<ServedModel>> old;
  {
    std::lock_guard lock(served_mutex_);
    old.swap(served_);
  }
}

}  // namespace flow::serving

// Named datasets of one server (see dataset_registry.h).
#include "server/serving/dataset_registry.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/log.h"

namespace shardcast::server {

namespace {

bool IsValidDatasetName(const std::string& name) {
  if (name.empty() || name.size() > kMaxDatasetNameLength) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<DatasetSpec>> DatasetsToServe(const ServerOptions& options) {
  std::vector<DatasetSpec> specs;
  if (!options.shards_dir.empty()) specs.push_back({kDefaultDatasetName, options.shards_dir});
  specs.insert(specs.end(), options.datasets.begin(), options.datasets.end());
  if (specs.empty()) {
    return absl::InvalidArgumentError("no data: give --shards DIR and/or --dataset NAME=DIR");
  }
  std::set<std::string> seen;
  for (const DatasetSpec& spec : specs) {
    if (!IsValidDatasetName(spec.name)) {
      return absl::InvalidArgumentError(absl::StrCat("dataset name '", LogSafe(spec.name),
                                                     "': use 1 to ", kMaxDatasetNameLength,
                                                     " of the characters A-Z a-z 0-9 . _ -"));
    }
    if (spec.dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset '", spec.name, "': the shard directory is empty"));
    }
    if (!seen.insert(spec.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset '", spec.name, "' is given twice",
          spec.name == kDefaultDatasetName ? " (--shards DIR already serves as 'default')" : ""));
    }
  }
  return specs;
}

DatasetRegistry::DatasetRegistry(std::vector<DatasetSpec> specs) {
  for (DatasetSpec& spec : specs) {
    auto slot = std::make_unique<Slot>();
    slot->entry.spec = std::move(spec);
    slots_.push_back(std::move(slot));
  }
}

DatasetRegistry::Slot* DatasetRegistry::Find(const std::string& name) const {
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (slot->entry.spec.name == name) return slot.get();
  }
  return nullptr;
}

std::string DatasetRegistry::Names() const {
  std::vector<std::string> names;
  for (const std::unique_ptr<Slot>& slot : slots_) names.push_back(slot->entry.spec.name);
  return absl::StrJoin(names, ", ");
}

const NamedDataset* DatasetRegistry::Publish(const std::string& name,
                                             std::unique_ptr<NamedDataset> dataset) {
  absl::MutexLock lock(&mu_);
  Slot* slot = Find(name);
  if (slot == nullptr) {
    slots_.push_back(std::make_unique<Slot>());
    slot = slots_.back().get();
    slot->entry.spec = {name, dataset->dir};
  }
  dataset->name = name;
  slot->owned = std::move(dataset);
  slot->entry.state = State::kServing;
  slot->entry.error = absl::OkStatus();
  slot->entry.data = slot->owned.get();
  return slot->entry.data;
}

void DatasetRegistry::Fail(const std::string& name, absl::Status error) {
  absl::MutexLock lock(&mu_);
  Slot* slot = Find(name);
  if (slot == nullptr) return;
  slot->entry.state = State::kFailed;
  slot->entry.error = std::move(error);
}

absl::StatusOr<const NamedDataset*> DatasetRegistry::Resolve(const std::string& asked) const {
  absl::MutexLock lock(&mu_);
  const Slot* slot = nullptr;
  if (asked.empty()) {
    slot = Find(kDefaultDatasetName);
    if (slot == nullptr && slots_.size() == 1) slot = slots_.front().get();
    if (slot == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset: this server serves several datasets (", Names(),
                       ") and none is 'default'; name one (shardcast-train --dataset NAME)"));
    }
  } else {
    slot = Find(asked);
    if (slot == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset '", LogSafe(asked), "' is not served here; this server has: ", Names()));
    }
  }
  const Entry& entry = slot->entry;
  switch (entry.state) {
    case State::kIndexing:
      return absl::UnavailableError(
          absl::StrCat("dataset '", entry.spec.name, "' is still indexing; retry shortly"));
    case State::kFailed:
      return absl::FailedPreconditionError(
          absl::StrCat("dataset '", entry.spec.name,
                       "': the server could not index its shards: ", entry.error.message()));
    case State::kServing:
      break;
  }
  return entry.data;
}

std::vector<DatasetRegistry::Entry> DatasetRegistry::Entries() const {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> entries;
  for (const std::unique_ptr<Slot>& slot : slots_) entries.push_back(slot->entry);
  return entries;
}

bool DatasetRegistry::AllServing() const {
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (slot->entry.state != State::kServing) return false;
  }
  return !slots_.empty();
}

}  // namespace shardcast::server

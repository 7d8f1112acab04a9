// The named datasets one server serves (--dataset NAME=DIR, --shards DIR as "default"):
// each is indexed on its own and served once ready; a registration names one.
#ifndef SHARDCAST_SERVER_SERVING_DATASET_REGISTRY_H_
#define SHARDCAST_SERVER_SERVING_DATASET_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/assembly/batch_assembler.h"
#include "server/assembly/served_dataset.h"
#include "server/serving/server_options.h"

namespace shardcast::server {

// The name --shards DIR serves under, and the one an empty RegisterRequest.dataset
// asks for.
inline constexpr char kDefaultDatasetName[] = "default";
inline constexpr size_t kMaxDatasetNameLength = 64;

// A dataset being served, with the assembler that turns its planned batches into
// bytes. Immutable once published; lives as long as the registry.
struct NamedDataset {
  std::string name;
  std::string dir;
  std::unique_ptr<ServedDataset> data;
  std::unique_ptr<BatchAssembler> assembler;
  // The server's byte-changing settings as they apply to this data (ServeSettingsFor
  // in job_registry.h): part of every job fingerprint of the dataset.
  ServeSettings serve;
};

// The datasets `options` asks for, in order: --shards as "default" (when given), then
// every --dataset. INVALID_ARGUMENT for none at all, a name given twice, an empty
// directory, or a name outside [A-Za-z0-9._-]{1,64}.
absl::StatusOr<std::vector<DatasetSpec>> DatasetsToServe(const ServerOptions& options);

// Thread-safe.
class DatasetRegistry {
 public:
  enum class State { kIndexing, kServing, kFailed };
  // One dataset as GetStatus reports it.
  struct Entry {
    DatasetSpec spec;
    State state = State::kIndexing;
    absl::Status error;                  // kFailed: why
    const NamedDataset* data = nullptr;  // kServing: what is served
  };

  // Every spec starts kIndexing. REQUIRES: names unique (DatasetsToServe).
  explicit DatasetRegistry(std::vector<DatasetSpec> specs);
  DatasetRegistry(const DatasetRegistry&) = delete;
  DatasetRegistry& operator=(const DatasetRegistry&) = delete;

  // Starts serving `dataset` as `name` (added when no spec had that name, for tests
  // that bring their own index). Returns the published dataset.
  const NamedDataset* Publish(const std::string& name, std::unique_ptr<NamedDataset> dataset)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `name` could not be indexed; registrations for it get `error`.
  void Fail(const std::string& name, absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);

  // The dataset a RegisterRequest.dataset of `asked` means: the named one; for ""
  // "default", or the only dataset when there is one. INVALID_ARGUMENT for an unknown
  // name, or "" with several datasets and no "default" (the message lists the names);
  // UNAVAILABLE while it is indexing; FAILED_PRECONDITION when indexing failed.
  absl::StatusOr<const NamedDataset*> Resolve(const std::string& asked) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every dataset, in the order given.
  std::vector<Entry> Entries() const ABSL_LOCKS_EXCLUDED(mu_);
  // True when every dataset is served.
  bool AllServing() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    Entry entry;
    std::unique_ptr<NamedDataset> owned;  // set by Publish, never replaced
  };
  Slot* Find(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Names() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Slots are never removed, so published datasets stay where they are.
  std::vector<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_DATASET_REGISTRY_H_

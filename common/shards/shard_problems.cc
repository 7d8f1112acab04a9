// Changed and unreadable shards of a reader (see shard_problems.h).
#include "common/shards/shard_problems.h"

#include <utility>

namespace shardcast {

absl::Status ShardProblems::KnownChange(uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  auto it = changed_error_.find(shard);
  return it == changed_error_.end() ? absl::OkStatus() : it->second;
}

absl::Status ShardProblems::RecordChange(uint32_t shard, std::string change, absl::Status error) {
  absl::MutexLock lock(&mu_);
  auto [it, first] = changed_error_.emplace(shard, std::move(error));
  if (first) changed_.push_back(ChangedShard{index_.shards[shard].path, std::move(change)});
  return it->second;
}

void ShardProblems::NoteUnreadable(uint32_t shard, std::string error) {
  absl::MutexLock lock(&mu_);
  unreadable_[shard] = std::move(error);
  unreadable_count_.store(unreadable_.size());
}

void ShardProblems::NoteReadable(uint32_t shard) {
  if (unreadable_count_.load(std::memory_order_relaxed) == 0) return;
  absl::MutexLock lock(&mu_);
  if (unreadable_.erase(shard) > 0) unreadable_count_.store(unreadable_.size());
}

std::vector<ChangedShard> ShardProblems::Changed() const {
  absl::MutexLock lock(&mu_);
  return changed_;
}

std::vector<UnreadableShard> ShardProblems::Unreadable() const {
  absl::MutexLock lock(&mu_);
  std::vector<UnreadableShard> out;
  for (const auto& [shard, error] : unreadable_) {
    out.push_back(UnreadableShard{index_.shards[shard].path, error});
  }
  return out;
}

}  // namespace shardcast

// The server's open streams (see stream_table.h).
#include "server/serving/stream_table.h"

#include <utility>

#include "server/serving/batch_window.h"
#include "server/serving/job_registry.h"

namespace shardcast::server {

StreamTable::Opened StreamTable::Open(Job* job, int32_t rank, int64_t epoch, int64_t start_batch,
                                      std::weak_ptr<BatchWindow> window,
                                      std::shared_ptr<StreamControl> control) {
  absl::MutexLock lock(&mu_);
  const RankKey key{job, rank};
  Opened opened;
  if (auto newest = newest_.find(key); newest != newest_.end()) {
    const Entry& replaced = streams_.at(newest->second);
    opened.replaced = Stream{replaced.control, replaced.window.lock()};
  }
  opened.stream_id = next_stream_id_++;
  streams_.emplace(opened.stream_id, Entry{key, std::move(window), std::move(control)});
  newest_[key] = opened.stream_id;
  ++open_of_job_[job];
  job->StreamStarted(rank, epoch, start_batch);
  return opened;
}

bool StreamTable::Sent(Job* job, int32_t rank, int64_t stream_id, int64_t batch_index,
                       absl::Time now) {
  absl::MutexLock lock(&mu_);
  job->BatchSent(rank);
  if (!IsNewest({job, rank}, stream_id)) return false;
  return job->RankTookBatch(rank, batch_index, now);
}

void StreamTable::Close(Job* job, int32_t rank, int64_t stream_id) {
  absl::MutexLock lock(&mu_);
  if (IsNewest({job, rank}, stream_id)) newest_.erase({job, rank});
  if (streams_.erase(stream_id) > 0 && --open_of_job_[job] == 0) open_of_job_.erase(job);
  job->StreamEnded();
}

bool StreamTable::IsNewest(const RankKey& rank, int64_t stream_id) const {
  auto newest = newest_.find(rank);
  return newest != newest_.end() && newest->second == stream_id;
}

StreamTable::Stream StreamTable::NewestOf(const Job* job, int32_t rank) const {
  absl::MutexLock lock(&mu_);
  auto newest = newest_.find({job, rank});
  if (newest == newest_.end()) return {};
  const Entry& entry = streams_.at(newest->second);
  return Stream{entry.control, entry.window.lock()};
}

std::vector<std::shared_ptr<BatchWindow>> StreamTable::NewestWindows() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<BatchWindow>> windows;
  for (const auto& [rank, stream_id] : newest_) {
    if (std::shared_ptr<BatchWindow> window = streams_.at(stream_id).window.lock()) {
      windows.push_back(std::move(window));
    }
  }
  return windows;
}

std::vector<std::shared_ptr<StreamControl>> StreamTable::NewestControls() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<StreamControl>> controls;
  for (const auto& [rank, stream_id] : newest_) {
    if (const Entry& entry = streams_.at(stream_id); entry.control != nullptr) {
      controls.push_back(entry.control);
    }
  }
  return controls;
}

int64_t StreamTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(streams_.size());
}

bool StreamTable::AnyOpen(const Job* job) const {
  absl::MutexLock lock(&mu_);
  return open_of_job_.count(job) > 0;
}

bool StreamTable::AwaitNone(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](const std::map<int64_t, Entry>* open) { return open->empty(); }, &streams_),
      deadline);
}

}  // namespace shardcast::server

// What the server may do to an open stream from outside its call: end it (a newer
// stream of the same rank replaced it, or its client stopped taking batches), and
// how long its current write has waited on the client. Shared by the stream's gRPC
// reactor (which installs the way to end the call and reports its writes), its
// job's rank state (replacement) and the idle reaper. Thread-safe.
#ifndef SHARDCAST_SERVER_SERVING_STREAM_CONTROL_H_
#define SHARDCAST_SERVER_SERVING_STREAM_CONTROL_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardcast::server {

class StreamControl {
 public:
  // Ends the call with `status` and frees the stream's batches; called at most once,
  // never after Detach() returned, and never with a lock of this object held.
  using Ender = std::function<void(const absl::Status& status)>;

  // `description`: the stream, for log lines ("job 'x' rank 0 epoch 1 batches [0, 12)").
  explicit StreamControl(std::string description) : description_(std::move(description)) {}
  StreamControl(const StreamControl&) = delete;
  StreamControl& operator=(const StreamControl&) = delete;

  // The reactor installs its ender when the stream starts and detaches it before the
  // reactor goes away (Detach waits for an End in progress).
  // Returns the status it was ended with when End came first (the reactor then ends
  // the call with it at once).
  std::optional<absl::Status> Attach(Ender ender) ABSL_LOCKS_EXCLUDED(mu_);
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the stream with `status` (ABORTED "replaced ...", CANCELLED "idle ...").
  // Only the first call does anything; true if it did.
  bool End(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  bool ended() const { return ended_.load(); }
  const std::string& description() const { return description_; }

  // The reactor's writes: a write waits on the client between these two calls.
  void WriteStarted(absl::Time now) { write_started_.store(absl::ToUnixNanos(now)); }
  void WriteDone() { write_started_.store(0); }
  // How long the write in flight has waited; nullopt when none is in flight.
  std::optional<absl::Duration> WriteWaiting(absl::Time now) const;

 private:
  const std::string description_;
  mutable absl::Mutex mu_;
  Ender ender_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_status_ ABSL_GUARDED_BY(mu_);  // End came before Attach
  bool ending_ ABSL_GUARDED_BY(mu_) = false;                     // an End is running the ender
  std::atomic<bool> ended_{false};
  std::atomic<int64_t> write_started_{0};  // unix ns; 0 = no write in flight
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_STREAM_CONTROL_H_

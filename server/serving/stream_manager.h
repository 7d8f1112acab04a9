// The server's open streams and the memory they hold: admission to --max-batch-memory,
// one stream per rank (a newer one replaces it; the table of open streams is
// stream_table.h, which the manager owns), reclaiming idle streams, shrinking
// windows under pressure, stall warnings, and the monitor thread that runs the
// periodic ones. The service (service_core.h) validates a request into a
// StreamPlan and hands it here; the gRPC reactor gets a StreamSession back.
//
// Admission never blocks the caller's thread (a gRPC callback thread, which also
// answers health and status): a stream that does not fit waits in a queue, up to
// --admission-wait, for memory that ending streams give back; the queue's own thread
// admits or refuses it and calls back.
#ifndef SHARDCAST_SERVER_SERVING_STREAM_MANAGER_H_
#define SHARDCAST_SERVER_SERVING_STREAM_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/plan/epoch_plan.h"
#include "server/assembly/batch_memory.h"
#include "server/base/clock.h"
#include "server/base/server_stats.h"
#include "server/serving/batch_window.h"
#include "server/serving/job_registry.h"
#include "server/serving/server_options.h"
#include "server/serving/stream_control.h"
#include "server/serving/stream_table.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// A validated StreamBatches request: everything a stream needs but its memory.
struct StreamPlan {
  std::shared_ptr<Job> job;
  int32_t rank = 0;
  int64_t epoch = 0;
  int64_t start_batch = 0;
  int64_t count = 0;  // messages the stream sends: n - start_batch
  std::unique_ptr<RankBatchIterator> batches;
  std::string description;  // "job 'x' rank 0 epoch 1 batches [0, 12)"
};

// What a session reads from and reports to the server around it: the manager that
// opens it hands it over. REQUIRES: each outlives the session.
struct SessionContext {
  const Clock* clock = nullptr;                 // times waits and batches
  ServerStats* stats = nullptr;                 // the traffic and wait counters
  StreamTable* streams = nullptr;               // holds the session's stream until it closes
  const std::atomic<bool>* draining = nullptr;  // the server drains
};

// One open StreamBatches call: hands out the batches of (job, rank, epoch) from
// start_batch in order and reports them (the job's progress goes through the stream
// table, the server's counters to the stats). Not thread-safe: the owner (one stream
// reactor) serializes calls.
class StreamSession {
 public:
  // `stream_id` is the stream's in `context.streams` (StreamTable::Open).
  StreamSession(SessionContext context, StreamPlan plan, std::shared_ptr<BatchWindow> window,
                int64_t stream_id, std::shared_ptr<StreamControl> control);
  ~StreamSession();  // Close()s
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;

  // Installs the reactor's way to end the call from outside (StreamControl::Attach).
  std::optional<absl::Status> Attach(StreamControl::Ender ender) {
    return control_->Attach(std::move(ender));
  }
  // Before the reactor goes away (waits for an End in progress).
  void Detach() { control_->Detach(); }
  // See BatchWindow::Take. A kPending result starts the clock of the client waiting
  // on the server; the next kBatch stops it (counted in ServerStats).
  absl::StatusOr<BatchWindow::TakeResult> Take(std::shared_ptr<AssembledBatch>* batch,
                                               std::function<void()> on_ready);
  // The reactor started writing a batch to the client.
  void WriteStarted();
  // The client's transport took `batch` (a message of `message_bytes` bytes): the
  // write that WriteStarted began is done.
  void Sent(const AssembledBatch& batch, int64_t message_bytes);
  // Ends the stream: stops decode work, frees its buffers, logs `how`. Idempotent.
  void Close(const std::string& how);

  // Stops the stream's work and frees its batches not yet taken, from any thread (a
  // stream ended from outside its call); Close() still follows.
  void CancelWindow() { window_->Cancel(); }

  // Whether the server drains (its batches then say so: Batch.server_draining).
  bool server_draining() const;

  int64_t count() const { return plan_.count; }
  int64_t sent() const { return sent_; }
  const std::string& description() const { return plan_.description; }

 private:
  const SessionContext context_;
  const StreamPlan plan_;
  const std::shared_ptr<BatchWindow> window_;
  const int64_t stream_id_;
  const std::shared_ptr<StreamControl> control_;
  int64_t sent_ = 0;
  bool closed_ = false;
  absl::Time pending_since_ = absl::InfinitePast();  // Take said kPending (not yet a batch)
};

class StreamManager {
 public:
  // A stream admitted (or refused). Runs exactly once, unless withdrawn first.
  using OpenDone = absl::AnyInvocable<void(absl::StatusOr<std::unique_ptr<StreamSession>>)>;
  // A stream waiting for memory; Withdraw() takes it out of the queue.
  class Pending;

  // `on_monitor_tick` runs on the monitor thread after each round (the service drops
  // expired jobs there). REQUIRES: `stats`, `jobs`, `clock` outlive the manager.
  StreamManager(const ServerOptions& options, ServerStats* stats, JobRegistry* jobs,
                const Clock* clock, std::function<void()> on_monitor_tick);
  ~StreamManager();  // Stop()s
  // Stops the monitor and admission threads; streams still waiting are refused
  // UNAVAILABLE. Idempotent. The budget stays usable: batches that outlive this (the
  // decode pool's, until it stops) still give their memory back to it.
  void Stop();
  StreamManager(const StreamManager&) = delete;
  StreamManager& operator=(const StreamManager&) = delete;

  // Opens `plan`'s stream, assembling batches with `assembler` (the job's dataset's).
  // A stream of the same rank still open is ended first (ABORTED, "replaced ...").
  // `done` gets the session, or RESOURCE_EXHAUSTED when not even one batch fits
  // --max-batch-memory (at once when it never can, after --admission-wait otherwise),
  // or UNAVAILABLE when the server drains meanwhile. It runs on this thread when the
  // stream fits at once, else on the admission thread; the returned Pending (null
  // when done already ran) can withdraw it.
  std::shared_ptr<Pending> Open(StreamPlan plan, BatchAssembler* assembler, OpenDone done)
      ABSL_LOCKS_EXCLUDED(admission_mu_);
  // The client went away while its stream waited: `done` will not run after this
  // returns (it waits for a call in progress). Null is fine.
  void Withdraw(const std::shared_ptr<Pending>& pending) ABSL_LOCKS_EXCLUDED(admission_mu_);

  // Refuses the streams waiting for memory (UNAVAILABLE, draining); open ones go on.
  void BeginDrain() ABSL_LOCKS_EXCLUDED(admission_mu_);
  // Waits (real time) until no stream is open or `deadline`; true when none is.
  bool AwaitNoOpenStreams(absl::Time deadline) const { return table_.AwaitNone(deadline); }

  // Ends the streams whose client has not taken a batch for --stream-idle-timeout
  // (CANCELLED, counted, logged); returns how many. The monitor thread calls it.
  int ReclaimIdleStreams();
  // Flags the ranks stalled for --stall-warn (stall_watch.h) and logs each new one
  // once; returns how many were newly flagged. The monitor thread calls it.
  int CheckStalls();

  // The stream figures of the status reply: open and waiting streams, the batch
  // memory budget, refusals, replacements, idle reclaims, given-back batches.
  void FillStatus(shardcast::v1::GetStatusResponse* response) const;

  int64_t open_streams() const { return table_.size(); }
  int64_t waiting_streams() const ABSL_LOCKS_EXCLUDED(admission_mu_);
  MemoryBudget& budget() { return budget_; }
  // The open streams (for the status reply and the jobs' expiry).
  const StreamTable& table() const { return table_; }

 private:
  // Reserves the stream's guaranteed batch: at once, or after reclaiming idle streams
  // and shrinking windows. RESOURCE_EXHAUSTED when it does not fit now.
  absl::StatusOr<std::shared_ptr<StreamMemory>> AdmitNow(int64_t batch_bytes);
  // Builds the admitted stream's window and session and adds it to the table.
  std::unique_ptr<StreamSession> Start(StreamPlan plan, BatchAssembler* assembler,
                                       std::shared_ptr<StreamMemory> memory);
  // Completes `pending` with `result` unless it was withdrawn.
  void Complete(const std::shared_ptr<Pending>& pending,
                absl::StatusOr<std::shared_ptr<StreamMemory>> result);
  // Ends `stream` (if still open) with `status` and frees its window.
  void EndStream(const StreamTable::Stream& stream, const absl::Status& status);
  // Shrinks every open window to its next batch; returns the batches given back.
  int ShrinkWindows();
  void AdmissionLoop() ABSL_LOCKS_EXCLUDED(admission_mu_);
  void MonitorLoop();
  // Budget's release hook: memory came back, the queue may fit now.
  void MemoryReleased() ABSL_LOCKS_EXCLUDED(admission_mu_);

  const ServerOptions& options_;
  ServerStats* const stats_;
  JobRegistry* const jobs_;
  const Clock* const clock_;
  const std::function<void()> on_monitor_tick_;
  // The open streams: every session reports to it until it closes.
  StreamTable table_;

  mutable absl::Mutex admission_mu_;
  absl::CondVar admission_changed_;  // a waiter came, memory came back, drain or stop
  std::deque<std::shared_ptr<Pending>> waiting_ ABSL_GUARDED_BY(admission_mu_);
  // Bumped by whatever may let a waiting stream go on (a stream came, memory came back,
  // drain, stop): a round that saw another value runs again at once.
  int64_t generation_ ABSL_GUARDED_BY(admission_mu_) = 0;
  // BeginDrain was called: read by the admission loop and by every batch sent.
  std::atomic<bool> draining_{false};
  bool stopping_ ABSL_GUARDED_BY(admission_mu_) = false;

  // --max-batch-memory. After the admission state: its release hook uses it.
  MemoryBudget budget_;

  std::thread admitter_;

  // Runs ReclaimIdleStreams and CheckStalls every quarter of the shorter of
  // --stream-idle-timeout and --stall-warn (when either is set).
  absl::Notification stop_monitor_;
  std::thread monitor_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_STREAM_MANAGER_H_

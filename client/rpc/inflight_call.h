// InflightCall: the RPC in flight on the thread that registers or prefetches for a
// RankStream, and the stop that cancels it from another thread (StartEpoch, Close, a
// Ctrl-C during Connect). The watchdog also cancels it, without stopping the thread.
#ifndef SHARDCAST_CLIENT_RPC_INFLIGHT_CALL_H_
#define SHARDCAST_CLIENT_RPC_INFLIGHT_CALL_H_

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/util/clock.h"

namespace shardcast::client {

// Thread-safe.
class InflightCall {
 public:
  // Publishes the context of the RPC about to start so that Stop and CancelCurrent reach
  // it. False (and nothing published) once stopped: the thread must not start it.
  bool Begin(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);
  // The RPC returned: nothing left to cancel.
  void End() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the RPC in flight and every wait on token(); Begin fails from now on, until
  // Reset.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  bool stopped() const ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the RPC in flight, if any, without stopping (a stalled stream).
  void CancelCurrent() ABSL_LOCKS_EXCLUDED(mu_);
  // Armed again for the next thread, once the stopped one was joined.
  void Reset() ABSL_LOCKS_EXCLUDED(mu_);
  // What ends the thread's waits between attempts; cancelled by Stop.
  const util::CancelToken& token() const { return token_; }

 private:
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  util::CancelToken token_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RPC_INFLIGHT_CALL_H_

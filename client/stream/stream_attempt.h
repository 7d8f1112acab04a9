// StreamAttempts: one StreamBatches call of a rank's prefetch loop at a time. It reads
// what arrives, checks each batch (stream_checks.h), queues it for Next() and keeps the
// read watchdog armed, until the stream ends, breaks, stalls, the server drains (the
// rank moves) or the rank is stopped; the prefetch loop in rank_stream.cc decides what
// comes next from the outcome.
#ifndef SHARDCAST_CLIENT_STREAM_STREAM_ATTEMPT_H_
#define SHARDCAST_CLIENT_STREAM_STREAM_ATTEMPT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "client/base/bounded_queue.h"
#include "client/base/read_watchdog.h"
#include "client/decode/encoded_batch_decoder.h"
#include "client/reconnect/reconnect_budget.h"
#include "client/rpc/inflight_call.h"
#include "client/rpc/replica_set.h"
#include "client/stream/rank_stream_options.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

// What one StreamBatches call came to.
struct AttemptOutcome {
  absl::Status status;   // OK once the epoch's last batch arrived (FromGrpc of the call's)
  int64_t received = 0;  // batches this call delivered
  bool stalled = false;  // the watchdog cut it
  bool moving = false;   // the server drains: the rank moves to another replica
  bool ended = false;    // the loop must end: an error was delivered, or stop
};

class StreamAttempts {
 public:
  // All are the RankStream's and outlive this; `registration` and `decoder` are read
  // only once set (a decoder: encoded batches are decoded into pixels as they arrive).
  StreamAttempts(const RankStreamOptions& options,
                 const shardcast::v1::RegisterResponse& registration,
                 const std::unique_ptr<EncodedBatchDecoder>& decoder,
                 BoundedQueue<ReceivedBatch>* queue, ReadWatchdog* watchdog, InflightCall* call)
      : options_(options),
        registration_(registration),
        decoder_(decoder),
        queue_(queue),
        watchdog_(watchdog),
        call_(call) {}

  // One call to `replica` for batches *next.. of `epoch` (n batches, dealt from
  // `sample_offset`), advancing *next by the batches queued. The read deadlines come
  // from `budget`, which hears of every batch. `can_move`: another replica is there to
  // move to when this one drains. A bad batch is delivered to the queue as the error.
  AttemptOutcome Run(const Replica& replica, bool can_move, int64_t epoch, int64_t n,
                     int64_t sample_offset, const shardcast::v1::MixtureResume& mix_resume,
                     int64_t* next, ReconnectBudget* budget);

 private:
  // The loop of Run: reads batches into the queue, checked, until the stream ends, the
  // queue stops taking them or the rank moves (OK), or a batch is bad (its error).
  absl::Status ReadBatches(grpc::ClientReader<WireBatch>* reader, bool can_move, int64_t epoch,
                           int64_t n, int64_t* next, ReconnectBudget* budget,
                           AttemptOutcome* attempt);
  // The decoder's pixels for an encoded batch that passed the checks, at `at`, in place
  // of its encoded images; each sample substituted here told to
  // options_.on_decode_failure.
  void DecodeImages(const StreamPosition& at, WireBatch* msg) const;
  shardcast::v1::StreamBatchesRequest Request(int64_t epoch, int64_t start_batch,
                                              int64_t sample_offset,
                                              const shardcast::v1::MixtureResume& mix_resume) const;

  const RankStreamOptions& options_;
  const shardcast::v1::RegisterResponse& registration_;
  const std::unique_ptr<EncodedBatchDecoder>& decoder_;
  BoundedQueue<ReceivedBatch>* const queue_;
  ReadWatchdog* const watchdog_;
  InflightCall* const call_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_STREAM_STREAM_ATTEMPT_H_

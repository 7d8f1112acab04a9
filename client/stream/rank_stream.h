// RankStream: one rank's view of a shardcast job over the wire, without torch.
// Registers (retrying while the server is unreachable), streams an epoch's batches
// from any start batch on a prefetch thread, checks each batch against the
// registration, and after a broken stream reconnects, re-registers and resumes at
// the first batch not yet received — refusing to resume when the job's data or
// config changed (job fingerprint, world size, batch size or n differ). A stream that
// stops delivering without breaking (a stalled server) is cut by a progress deadline
// and handled as a broken one.
// BatchStream (client/batch_stream.h) builds torch tensors on it; a Python or
// another-language client follows the same protocol.
#ifndef SHARDCAST_CLIENT_STREAM_RANK_STREAM_H_
#define SHARDCAST_CLIENT_STREAM_RANK_STREAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/base/interruptible.h"
#include "client/checks/stream_checks.h"
#include "client/stream/rank_stream_options.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

class RankStream {
 public:
  // Registers the rank (retrying while the server is unreachable, up to the
  // deadline). Errors: the server's refusal (INVALID_ARGUMENT, FAILED_PRECONDITION
  // naming the field, UNAUTHENTICATED for a missing or wrong token, ...), a failed TLS
  // handshake (UNAVAILABLE with a hint; never retried), UNAVAILABLE once the
  // deadline passed, DATA_LOSS for a registration that cannot size a batch (batch size,
  // image shape and batch bytes out of bounds: a hostile or broken server), or CANCELLED
  // when `interrupted` said so (it is polled on the calling thread while the
  // registration runs on another).
  static absl::StatusOr<std::unique_ptr<RankStream>> Connect(
      RankStreamOptions options, const InterruptCheck& interrupted = nullptr);
  ~RankStream();  // stops the prefetch thread and cancels the open stream
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;

  const RankStreamOptions& options() const;
  const shardcast::v1::RegisterResponse& registration() const;
  int64_t batches_per_epoch() const;

  // Starts streaming `epoch` from `start_batch` (cancels any stream in progress).
  // `sample_offset` > 0: an elastic resume, the epoch dealt from that global position
  // (StreamBatchesRequest.sample_offset; split sample only), which has
  // batches_in_epoch() batches; start_batch counts from there.
  // `mix_resume` (a mixed job resumed from another run: StreamBatchesRequest.mix_resume)
  // goes with every request of the epoch; unset for any other stream.
  absl::Status StartEpoch(int64_t epoch, int64_t start_batch = 0, int64_t sample_offset = 0,
                          const shardcast::v1::MixtureResume& mix_resume = {});
  // Batches of the epoch last started: batches_per_epoch(), or fewer from an offset.
  int64_t batches_in_epoch() const;

  // Next batch of the current epoch, or std::nullopt once batches_in_epoch()
  // batches have been handed out. An error (returned again on later calls until the
  // next StartEpoch) means the server stayed unreachable past the reconnect
  // deadline, answered with a status a reconnect cannot fix, changed the job, sent a
  // batch that fails the checks (DATA_LOSS), or delivered nothing within the stream
  // timeout (also after reconnecting). CANCELLED when `interrupted` said so while it
  // waited (no batch is taken: the next call gets it), or once Close() was called
  // (IsClosed; also while this call waited on another thread).
  absl::StatusOr<std::optional<ReceivedBatch>> Next(const InterruptCheck& interrupted = nullptr);
  // Whether Next() would return without waiting (a batch, the end or an error is ready).
  // With one consumer, true stays true until that consumer calls Next() or StartEpoch().
  bool NextIsReady() const;

  // Reconnects made so far (tests, metrics).
  int64_t reconnects() const;
  // Samples this client could not decode (decode kCpu) and substituted, so far.
  int64_t client_substituted() const;

  // Ends the stream for good, from any thread: stops the prefetch thread and cancels the
  // call in flight; a Next() waiting on another thread returns CANCELLED (IsClosed) at
  // once, and so do every later Next() and StartEpoch(). The object must still outlive
  // every call in progress.
  void Close();

 private:
  class Impl;
  explicit RankStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Errors of Next() told apart by kind (stream_checks.h): IsJobChanged (after a reconnect
// the server has another job fingerprint, world size, batch size or n; FAILED_PRECONDITION,
// like some of the server's own refusals, marked by a payload so that a client can report
// it as its own kind: Python's JobChangedError), and IsClosed (Next() or StartEpoch()
// after Close()).

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_STREAM_RANK_STREAM_H_

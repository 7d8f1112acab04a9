// One StreamBatches call of the prefetch loop (see stream_attempt.h).
#include "client/stream/stream_attempt.h"

#include <iostream>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/checks/stream_checks.h"
#include "client/rpc/channel.h"
#include "client/rpc/wire_batch_checks.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// The status the prefetch loop acts on when the call ended without an error of its own
// to deliver: a move, a stall or an early end become retryable failures.
absl::Status Outcome(const AttemptOutcome& attempt, const Replica& replica,
                     double stream_timeout_seconds, int64_t next, int64_t n) {
  if (attempt.moving) {
    return absl::UnavailableError(
        absl::StrFormat("server %s is draining; moving after batch %d", replica.target, next));
  }
  if (attempt.stalled && next < n) {
    return absl::DeadlineExceededError(
        absl::StrFormat("no batch for %g s (stream timeout); stream cancelled after batch %d",
                        stream_timeout_seconds, next));
  }
  if (attempt.status.ok() && next < n) {
    return absl::UnavailableError(absl::StrFormat("stream ended after batch %d of %d", next, n));
  }
  return attempt.status;
}

}  // namespace

void StreamAttempts::DecodeImages(const StreamPosition& at, WireBatch* msg) const {
  const auto& shape = msg->header().shape();  // [B, 3, C, C]: checked
  grpc::Slice pixels(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (const DecodeFailure& failure :
       decoder_->Decode(msg->mutable_header(), const_cast<uint8_t*>(pixels.begin()))) {
    const std::string notice = absl::StrFormat(
        "job '%s' rank %d epoch %d batch %d sample %d, %s; substituted (every byte 128)", at.job_id,
        at.rank, at.epoch, at.batch, failure.sample, failure.notice);
    if (options_.on_decode_failure) {
      options_.on_decode_failure(notice);
    } else {
      std::cerr << "shardcast: could not decode " << notice << "\n";
    }
  }
  // Decoded, the batch is what server delivery sends: the compressed images are let go
  // of now rather than held in the prefetch queue.
  for (v1::SampleInfo& sample : *msg->mutable_header()->mutable_samples()) sample.clear_encoded();
  msg->SetImages(std::move(pixels));
}

shardcast::v1::StreamBatchesRequest StreamAttempts::Request(
    int64_t epoch, int64_t start_batch, int64_t sample_offset,
    const shardcast::v1::MixtureResume& mix_resume) const {
  shardcast::v1::StreamBatchesRequest request;
  request.set_job_id(options_.job.job_id());
  request.set_rank(options_.job.rank());
  request.set_epoch(epoch);
  request.set_start_batch(start_batch);
  request.set_sample_offset(sample_offset);
  if (mix_resume.position() > 0) *request.mutable_mix_resume() = mix_resume;
  request.set_job_fingerprint(registration_.job_fingerprint());
  return request;
}

AttemptOutcome StreamAttempts::Run(const Replica& replica, bool can_move, int64_t epoch, int64_t n,
                                   int64_t sample_offset,
                                   const shardcast::v1::MixtureResume& mix_resume, int64_t* next,
                                   ReconnectBudget* budget) {
  AttemptOutcome attempt;
  grpc::ClientContext context;
  if (!call_->Begin(&context)) {
    attempt.ended = true;
    return attempt;
  }
  watchdog_->Arm(budget->ReadDeadline(options_.clock->Now()));  // counts from the request
  // The generated stub would parse every batch into a v1::Batch, copying its
  // pixels; a reader of WireBatch keeps them in the received slices.
  std::unique_ptr<grpc::ClientReader<WireBatch>> reader =
      replica.batch_stub.StreamBatches(&context, Request(epoch, *next, sample_offset, mix_resume));
  absl::Status bad = ReadBatches(reader.get(), can_move, epoch, n, next, budget, &attempt);
  watchdog_->Arm(absl::InfiniteFuture());
  if (!bad.ok() || call_->stopped() || attempt.moving) context.TryCancel();
  attempt.status = FromGrpc(reader->Finish());
  call_->End();
  attempt.stalled = watchdog_->TakeStalled();
  if (!bad.ok()) {
    queue_->Push(std::move(bad));
    attempt.ended = true;
  } else if (call_->stopped()) {
    attempt.ended = true;
  } else {
    attempt.status = Outcome(attempt, replica, options_.stream_timeout_seconds, *next, n);
  }
  return attempt;
}

absl::Status StreamAttempts::ReadBatches(grpc::ClientReader<WireBatch>* reader, bool can_move,
                                         int64_t epoch, int64_t n, int64_t* next,
                                         ReconnectBudget* budget, AttemptOutcome* attempt) {
  const StreamPosition rank{options_.job.job_id(), options_.job.rank(), epoch, 0};
  auto msg = std::make_shared<WireBatch>();
  while (reader->Read(msg.get())) {
    watchdog_->Arm(absl::InfiniteFuture());  // waiting for queue space is the consumer's time
    StreamPosition at = rank;
    at.batch = *next;
    if (absl::Status bad = CheckBatch(*msg, registration_, at, n); !bad.ok()) return bad;
    if (decoder_ != nullptr) DecodeImages(at, msg.get());
    if (options_.join_images) msg->JoinImages();
    if (!queue_->WaitForSpace()) return absl::OkStatus();
    const bool draining = msg->header().server_draining();
    queue_->Push(ReceivedBatch(std::move(msg)));
    ++*next;
    ++attempt->received;
    budget->BatchArrived();
    // A draining server's batches say so: with another replica to go to, the rank
    // moves now rather than when the grace period cuts the stream.
    if (draining && can_move && *next < n) {
      attempt->moving = true;
      return absl::OkStatus();
    }
    msg = std::make_shared<WireBatch>();
    watchdog_->Arm(budget->ReadDeadline(options_.clock->Now()));
  }
  // A message that did not parse ends Read() as the stream's end would: it is the
  // server's error, not the network's, so the stream fails here, not retried (and
  // the call is cancelled, or Finish() waits for the rest of it).
  if (!msg->parse_error().ok()) {
    return absl::DataLossError(absl::StrFormat("job '%s' rank %d epoch %d batch %d: %s",
                                               rank.job_id, rank.rank, epoch, *next,
                                               msg->parse_error().message()));
  }
  return absl::OkStatus();
}

}  // namespace shardcast::client

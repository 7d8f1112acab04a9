// The rank's checks of what a server says (see stream_checks.h).
#include "client/protocol/stream_checks.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/plan/job_config.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// Marks SameJob's FAILED_PRECONDITION, which a server's refusal of the same code is not.
constexpr char kJobChangedPayload[] = "type.shardcast.dev/client.JobChanged";
// Marks the CANCELLED of a closed stream, which an interrupted wait's is not.
constexpr char kClosedPayload[] = "type.shardcast.dev/client.Closed";

// What is wrong with a registration's batch figures; empty when nothing is. A batch size
// of 0 or an image of no pixels made batches of no bytes that a consumer indexed (SIGSEGV
// in Python), extents of 2^32 overflowed the byte count to 0, and a huge shape would
// size a pinned buffer of terabytes. The bounds are the server's own (job_config.h) and
// what one protobuf message holds.
std::string WrongBatchFigures(const v1::RegisterResponse& r) {
  const auto& shape = r.image_shape();
  const auto extent_ok = [](int64_t e) { return e >= 1 && e <= kMaxResize; };
  if (r.batches_per_epoch() <= 0) {
    return absl::StrFormat("batches_per_epoch %d (want >= 1)", r.batches_per_epoch());
  }
  if (r.batch_size() < 1 || r.batch_size() > kMaxBatchSize) {
    return absl::StrFormat("batch size %d (want 1..%d)", r.batch_size(), kMaxBatchSize);
  }
  if (shape.size() != 3 || shape[0] != 3 || !extent_ok(shape[1]) || !extent_ok(shape[2])) {
    return absl::StrFormat("image shape [%s] (want [3,H,W] with H and W in 1..%d)",
                           absl::StrJoin(shape, ","), kMaxResize);
  }
  if (const int64_t bytes = int64_t{r.batch_size()} * 3 * shape[1] * shape[2];
      bytes > kMaxBatchPixelBytes) {
    return absl::StrFormat(
        "batches of %d pixel bytes (batch size %d, image shape [%s]), more than one message "
        "holds (%d)",
        bytes, r.batch_size(), absl::StrJoin(shape, ","), kMaxBatchPixelBytes);
  }
  return "";
}

// What changed between two registrations of a job; empty when nothing that matters did.
std::string JobChange(const v1::RegisterResponse& was, const v1::RegisterResponse& now) {
  if (now.job_fingerprint() != was.job_fingerprint()) {
    return absl::StrFormat(
        "job fingerprint %s (was %s: other data, job config or byte-changing server settings)",
        now.job_fingerprint(), was.job_fingerprint());
  }
  if (now.world_size() != was.world_size() || now.batch_size() != was.batch_size()) {
    return absl::StrFormat("world size %d and batch size %d (were %d and %d)", now.world_size(),
                           now.batch_size(), was.world_size(), was.batch_size());
  }
  if (now.batches_per_epoch() != was.batches_per_epoch()) {
    return absl::StrFormat("%d batches per epoch (was %d)", now.batches_per_epoch(),
                           was.batches_per_epoch());
  }
  return "";
}

}  // namespace

absl::Status CheckRegistration(const v1::RegisterResponse& registration, absl::string_view where) {
  const std::string wrong = WrongBatchFigures(registration);
  if (wrong.empty()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(where, " answered a registration no batch can be received with: ", wrong));
}

absl::Status CheckBatch(const WireBatch& wire, const v1::RegisterResponse& registration,
                        const StreamPosition& at, int64_t epoch_batches) {
  const v1::Batch& msg = wire.header();
  if (at.batch >= epoch_batches) {
    return absl::DataLossError(
        absl::StrFormat("job '%s' rank %d epoch %d: server sent batch %d past the last one (%d)",
                        at.job_id, at.rank, at.epoch, msg.index(), epoch_batches - 1));
  }
  const std::string where =
      absl::StrFormat("job '%s' rank %d epoch %d batch %d", at.job_id, at.rank, at.epoch, at.batch);
  if (msg.epoch() != at.epoch || msg.index() != at.batch) {
    return absl::DataLossError(absl::StrFormat(
        "%s: server sent (epoch %d, index %d) instead; the stream is out of sequence", where,
        msg.epoch(), msg.index()));
  }
  // Every batch is full (remainder drop or pad: the fixed-count guarantee), so its
  // shape is the registration's exactly and a consumer can size its buffers once.
  const auto& image_shape = registration.image_shape();
  if (msg.shape_size() != 4 || image_shape.size() != 3 ||
      msg.shape(0) != registration.batch_size() || msg.shape(1) != image_shape[0] ||
      msg.shape(2) != image_shape[1] || msg.shape(3) != image_shape[2]) {
    return absl::DataLossError(absl::StrFormat(
        "%s: batch shape [%s] does not match the registered batch size %d and image shape "
        "[%s]",
        where, absl::StrJoin(msg.shape(), ","), registration.batch_size(),
        absl::StrJoin(image_shape, ",")));
  }
  const int64_t b = msg.shape(0);
  const int64_t bytes = b * msg.shape(1) * msg.shape(2) * msg.shape(3);
  if (wire.image_bytes() != bytes || msg.labels_size() != b || msg.samples_size() != b) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %d image bytes, %d labels, %d samples for shape [%s] (want %d, %d, %d)", where,
        wire.image_bytes(), msg.labels_size(), msg.samples_size(), absl::StrJoin(msg.shape(), ","),
        bytes, b, b));
  }
  return absl::OkStatus();
}

std::string ResumedServer(absl::string_view registered_at, absl::string_view target) {
  if (target == registered_at) return absl::StrCat("server ", registered_at);
  return absl::StrCat("replica ", target, " (the rank registered at ", registered_at,
                      ": the replicas serve other data, defaults or settings such as "
                      "--max-member-bytes; each server logs its settings)");
}

absl::Status SameJob(const v1::RegisterResponse& was, const v1::RegisterResponse& now,
                     absl::string_view server, const StreamPosition& at) {
  const std::string changed = JobChange(was, now);
  if (changed.empty()) return absl::OkStatus();
  absl::Status status = absl::FailedPreconditionError(absl::StrFormat(
      "job '%s' rank %d: after reconnecting, %s has %s; cannot resume epoch %d at batch %d",
      at.job_id, at.rank, server, changed, at.epoch, at.batch));
  status.SetPayload(kJobChangedPayload, absl::Cord("1"));
  return status;
}

bool IsJobChanged(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         status.GetPayload(kJobChangedPayload).has_value();
}

absl::Status ClosedError(absl::string_view job_id, int rank) {
  absl::Status status = absl::CancelledError(
      absl::StrFormat("job '%s' rank %d: the stream was closed", job_id, rank));
  status.SetPayload(kClosedPayload, absl::Cord("1"));
  return status;
}

absl::Status InterruptedError(absl::string_view job_id, int rank) {
  return absl::CancelledError(
      absl::StrFormat("job '%s' rank %d: interrupted while waiting", job_id, rank));
}

bool IsClosed(const absl::Status& status) {
  return status.code() == absl::StatusCode::kCancelled &&
         status.GetPayload(kClosedPayload).has_value();
}

}  // namespace shardcast::client

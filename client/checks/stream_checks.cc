// The rank's checks of what a server says (see stream_checks.h).
#include "client/checks/stream_checks.h"

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/plan/field_spec.h"
#include "common/plan/job_config.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// Marks SameJob's FAILED_PRECONDITION, which a server's refusal of the same code is not.
constexpr char kJobChangedPayload[] = "type.shardcast.dev/client.JobChanged";
// Marks the CANCELLED of a closed stream, which an interrupted wait's is not.
constexpr char kClosedPayload[] = "type.shardcast.dev/client.Closed";

// The registration's fields, parsed (the server sends their spelling).
absl::StatusOr<std::vector<FieldSpec>> RegisteredFields(const v1::RegisterResponse& r) {
  return ParseFieldSpecs({r.fields().begin(), r.fields().end()});
}

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
  if (absl::StatusOr<std::vector<FieldSpec>> fields = RegisteredFields(r); !fields.ok()) {
    return absl::StrCat("fields: ", fields.status().message());
  }
  if (!RegisteredWithImages(r)) {
    if (r.fields().empty()) return "a job without images and without fields (nothing to serve)";
    return "";
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

// What is wrong with a sample's fields; empty when nothing is. `fields` are the
// registration's.
std::string WrongSampleFields(const v1::SampleInfo& sample, const std::vector<FieldSpec>& fields) {
  if (!sample.valid()) {
    if (sample.fields().empty()) return "";
    return absl::StrFormat("padding with %d field values (want none)", sample.fields_size());
  }
  if (sample.fields_size() != static_cast<int>(fields.size())) {
    return absl::StrFormat("%d field values for the %d registered fields [%s]",
                           sample.fields_size(), fields.size(), FieldSpecsString(fields));
  }
  for (size_t f = 0; f < fields.size(); ++f) {
    const v1::FieldValue& value = sample.fields(static_cast<int>(f));
    if (value.present()) continue;
    if (!fields[f].optional) {
      return absl::StrFormat("required field '%s' reported missing", fields[f].Name());
    }
    if (!value.data().empty()) {
      return absl::StrFormat("missing field '%s' with %d bytes", fields[f].Name(),
                             value.data().size());
    }
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

// What is wrong with a sample's encoded image; empty when nothing is. `c` is the batch's
// output size, `mode` the registration's transform. The crop must lie inside the image
// it is taken from (the cut, or the stored image), so that a client sizes nothing by a
// hostile figure; DecodeWithCrop checks it again against the image's own header.
std::string WrongEncodedImage(const v1::SampleInfo& sample, int64_t c, v1::TransformMode mode) {
  if (!sample.valid()) return sample.has_encoded() ? "padding with an encoded image" : "";
  if (!sample.has_encoded()) return "no encoded image";
  const v1::EncodedImage& e = sample.encoded();
  if (e.output_size() != c) {
    return absl::StrFormat("encoded output size %d in a batch of %d x %d images", e.output_size(),
                           c, c);
  }
  if (e.data().empty()) {
    return sample.substituted() ? "" : "an encoded image without data not marked substituted";
  }
  const auto within = [](int64_t start, int64_t size, int64_t extent) {
    return start >= 0 && size >= 1 && start + size <= extent;
  };
  if (e.source_width() < 1 || e.source_height() < 1) {
    return absl::StrFormat("encoded source size %d x %d", e.source_width(), e.source_height());
  }
  int64_t width = e.source_width(), height = e.source_height();
  if (e.cut_width() != 0 || e.cut_height() != 0 || e.cut_left() != 0 || e.cut_top() != 0) {
    if (mode != v1::TRANSFORM_MODE_RANDOM || !within(e.cut_left(), e.cut_width(), width) ||
        !within(e.cut_top(), e.cut_height(), height)) {
      return absl::StrFormat("cut %d x %d at (%d, %d) of a %d x %d image (%s)", e.cut_width(),
                             e.cut_height(), e.cut_left(), e.cut_top(), width, height,
                             v1::TransformMode_Name(mode));
    }
    width = e.cut_width();
    height = e.cut_height();
  }
  if (mode == v1::TRANSFORM_MODE_CENTER) {
    width = e.resize_width();
    height = e.resize_height();
    if (e.width() != c || e.height() != c) {
      return absl::StrFormat("center crop %d x %d of an image resized to %d x %d (want %d x %d)",
                             e.width(), e.height(), width, height, c, c);
    }
  }
  if (!within(e.left(), e.width(), width) || !within(e.top(), e.height(), height)) {
    return absl::StrFormat("crop %d x %d at (%d, %d) outside its %d x %d image", e.width(),
                           e.height(), e.left(), e.top(), width, height);
  }
  return "";
}

// Each sample's fields against the registration's (see CheckBatch).
absl::Status CheckFields(const v1::Batch& msg, const v1::RegisterResponse& registration,
                         const std::string& where) {
  // Checked at registration: the fields parse.
  absl::StatusOr<std::vector<FieldSpec>> fields = RegisteredFields(registration);
  if (!fields.ok()) return fields.status();
  const bool encoded =
      RegisteredWithImages(registration) && registration.delivery() == v1::IMAGE_DELIVERY_ENCODED;
  for (int i = 0; i < msg.samples_size(); ++i) {
    std::string wrong = WrongSampleFields(msg.samples(i), *fields);
    if (wrong.empty() && encoded) {
      wrong = WrongEncodedImage(msg.samples(i), msg.shape(3), registration.transform().mode());
    }
    if (!wrong.empty()) {
      return absl::DataLossError(absl::StrFormat("%s sample %d (key '%s'): %s", where, i,
                                                 absl::CHexEscape(msg.samples(i).key()), wrong));
    }
  }
  return absl::OkStatus();
}

// A batch of a job without images: no shape, no image bytes, B labels and B samples.
absl::Status CheckBatchWithoutImages(const v1::Batch& msg, int64_t image_bytes,
                                     const v1::RegisterResponse& registration,
                                     const std::string& where) {
  const int64_t b = registration.batch_size();
  if (msg.shape_size() != 0 || image_bytes != 0 || msg.labels_size() != b ||
      msg.samples_size() != b) {
    return absl::DataLossError(absl::StrFormat(
        "%s: shape [%s], %d image bytes, %d labels, %d samples in a batch of a job without "
        "images (want no shape, no image bytes, %d labels and %d samples)",
        where, absl::StrJoin(msg.shape(), ","), image_bytes, msg.labels_size(), msg.samples_size(),
        b, b));
  }
  return CheckFields(msg, registration, where);
}

}  // namespace

absl::Status CheckRegistration(const v1::RegisterResponse& registration, absl::string_view where) {
  const std::string wrong = WrongBatchFigures(registration);
  if (wrong.empty()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(where, " answered a registration no batch can be received with: ", wrong));
}

bool RegisteredWithImages(const v1::RegisterResponse& registration) {
  return registration.image() || !registration.image_shape().empty();
}

absl::Status CheckRegisteredAsAsked(const v1::RegisterRequest& job,
                                    const v1::RegisterResponse& registration,
                                    absl::string_view where) {
  std::string wrong;
  if (!job.fields().empty()) {
    absl::StatusOr<std::vector<FieldSpec>> asked =
        ParseFieldSpecs({job.fields().begin(), job.fields().end()});
    absl::StatusOr<std::vector<FieldSpec>> answered = RegisteredFields(registration);
    // The request was the server's to refuse; one it took must come back as asked.
    if (asked.ok() && answered.ok() && *asked != *answered) {
      wrong = absl::StrFormat("fields [%s] for the fields [%s] asked", FieldSpecsString(*answered),
                              FieldSpecsString(*asked));
    }
  }
  if (wrong.empty() && job.has_image() && job.image() != RegisteredWithImages(registration)) {
    wrong = job.image() ? "a job without images for one with images"
                        : "a job with images for one without (image false)";
  }
  if (wrong.empty() && RegisteredWithImages(registration)) {
    // A server older than delivery modes leaves it unset and sends pixels: right for
    // delivery server, never for encoded.
    const bool encoded_asked = job.delivery() == v1::IMAGE_DELIVERY_ENCODED;
    const bool encoded_answered = registration.delivery() == v1::IMAGE_DELIVERY_ENCODED;
    if (encoded_asked != encoded_answered && job.delivery() != v1::IMAGE_DELIVERY_UNSPECIFIED) {
      wrong = absl::StrFormat("delivery %s for the delivery %s asked",
                              v1::ImageDelivery_Name(registration.delivery()),
                              v1::ImageDelivery_Name(job.delivery()));
    }
  }
  if (wrong.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s registered %s; the server (version '%s') does not serve the job as asked (a "
      "server older than fields serves images alone, one older than delivery modes "
      "decodes them itself: upgrade it)",
      where, wrong, registration.server_version()));
}

absl::Status CheckBatch(const v1::Batch& msg, int64_t image_bytes,
                        const v1::RegisterResponse& registration, const StreamPosition& at,
                        int64_t epoch_batches) {
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
  if (!RegisteredWithImages(registration))
    return CheckBatchWithoutImages(msg, image_bytes, registration, where);
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
  // Encoded delivery: the shape is the decoded batch's, and the images come in the
  // samples (checked with their fields).
  const int64_t bytes = registration.delivery() == v1::IMAGE_DELIVERY_ENCODED
                            ? 0
                            : b * msg.shape(1) * msg.shape(2) * msg.shape(3);
  if (image_bytes != bytes || msg.labels_size() != b || msg.samples_size() != b) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %d image bytes, %d labels, %d samples for shape [%s] (want %d, %d, %d)", where,
        image_bytes, msg.labels_size(), msg.samples_size(), absl::StrJoin(msg.shape(), ","), bytes,
        b, b));
  }
  return CheckFields(msg, registration, where);
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

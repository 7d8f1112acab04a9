// The checks a rank makes of what a server says, as pure functions (RankStream calls
// them; tests call them on made-up messages): that a registration can size a batch,
// that a received batch is the one due and has the registration's shape, and that after
// a reconnect the server still serves the same job. Each error names the job, the rank
// and where in the epoch, and says what was wrong.
#ifndef SHARDCAST_CLIENT_CHECKS_STREAM_CHECKS_H_
#define SHARDCAST_CLIENT_CHECKS_STREAM_CHECKS_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

// The most pixel bytes a batch may have (B*3*H*W): what one protobuf message can hold.
// A registration that announces more is refused before anything is sized by it.
inline constexpr int64_t kMaxBatchPixelBytes = (int64_t{1} << 31) - 1;

// The most bytes a received Batch message may have: what one protobuf message can hold.
// The stream's channel refuses a larger one. The registration bounds the pixels, not
// the header: labels, sample infos and the members' bytes (SampleInfo.fields), which
// depend on the samples.
inline constexpr int kMaxBatchMessageBytes = std::numeric_limits<int32_t>::max();

// Where a check is made: a rank of a job, at a batch of an epoch.
struct StreamPosition {
  std::string job_id;
  int rank = 0;
  int64_t epoch = 0;
  int64_t batch = 0;  // the batch due next
};

// Whether a registration's batches carry images: RegisterResponse.image, or an image
// shape from a server older than fields (which leaves `image` unset, i.e. false).
bool RegisteredWithImages(const shardcast::v1::RegisterResponse& registration);

// Checks what a registration says about the memory of every batch before anything is
// sized by it (batches per epoch, batch size, image shape, pixel bytes of a batch; a
// job without images must have fields, and its fields must parse). DATA_LOSS naming
// `where` (server and job) and the wrong figure.
absl::Status CheckRegistration(const shardcast::v1::RegisterResponse& registration,
                               absl::string_view where);

// Checks that the server registered `job` as asked: the fields it asked for (compared
// parsed, as the server answers them normalized) and, when it asked, with or without
// images. A server older than fields ignores both and answers a job of images alone:
// FAILED_PRECONDITION naming `where`, what was asked, what was answered and the
// server's version, instead of batches without the members the caller wants. Likewise
// the image delivery asked (a server older than delivery modes leaves it unset and
// decodes: fine for delivery server, refused for encoded), for a job with images.
absl::Status CheckRegisteredAsAsked(const shardcast::v1::RegisterRequest& job,
                                    const shardcast::v1::RegisterResponse& registration,
                                    absl::string_view where);

// Checks a received batch against what must come next at `at` of an epoch of
// `epoch_batches` batches: not past the last one, in sequence, the registration's shape
// (no shape and no image bytes for a job without images), as many image bytes, labels
// and samples as the shape says, and per sample one FieldValue per registered field
// (none for padding; a required one present, a missing one without bytes). Encoded
// delivery: no image bytes (the shape is the decoded batch's), and each valid sample has
// an `encoded` image of output size C whose cut and crop lie inside its image (padding
// has none; empty data only marked substituted). DATA_LOSS naming both (and the sample).
// `header` is the batch's message without its images, `image_bytes` how many image bytes
// came with it (client/rpc/wire_batch_checks.h checks a WireBatch as received).
absl::Status CheckBatch(const shardcast::v1::Batch& header, int64_t image_bytes,
                        const shardcast::v1::RegisterResponse& registration,
                        const StreamPosition& at, int64_t epoch_batches);

// How an error names the server a rank re-registered with: `target`, and when that is
// not `registered_at` (the replica of the first registration) a hint that replicas
// must serve the same data and settings.
std::string ResumedServer(absl::string_view registered_at, absl::string_view target);

// After a reconnect: the server (`server`, from ResumedServer) must still serve the job
// the rank started with (same job fingerprint, world size, batch size and batches per
// epoch), or resuming at `at` would silently hand out other samples or other pixels.
// FAILED_PRECONDITION marked so that IsJobChanged tells it apart from a server's refusal.
absl::Status SameJob(const shardcast::v1::RegisterResponse& was,
                     const shardcast::v1::RegisterResponse& now, absl::string_view server,
                     const StreamPosition& at);

// Whether `status` is SameJob's error (the job changed under the rank).
bool IsJobChanged(const absl::Status& status);

// The CANCELLED of a closed stream (ClosedError), told apart by IsClosed from the
// CANCELLED of an interrupted wait (InterruptedError).
absl::Status ClosedError(absl::string_view job_id, int rank);
absl::Status InterruptedError(absl::string_view job_id, int rank);
bool IsClosed(const absl::Status& status);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_CHECKS_STREAM_CHECKS_H_

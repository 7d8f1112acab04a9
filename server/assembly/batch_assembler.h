// Turns a planned batch into bytes: reads each sample's image member, decodes and
// transforms it into its slot of the batch buffer on the decode pool (or, in encoded
// delivery, puts it as stored with its crop in SampleInfo.encoded), reads the members
// the job asks for beside it (SampleInfo.fields), and fills the Batch message fields
// (labels, per-sample info) around them.
#ifndef SHARDCAST_SERVER_ASSEMBLY_BATCH_ASSEMBLER_H_
#define SHARDCAST_SERVER_ASSEMBLY_BATCH_ASSEMBLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/image/image_transform.h"
#include "common/memory/memory_budget.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/field_spec.h"
#include "common/util/clock.h"
#include "common/util/retry_policy.h"
#include "server/assembly/batch_memory.h"
#include "server/assembly/decode_pool.h"
#include "server/assembly/served_dataset.h"
#include "server/base/server_stats.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// What each batch of a job holds (from its JobConfig): the transformed image, unless
// `image` is false, and the members of `fields`, in that order, as stored in the tar.
// With encoded delivery, the image is the member as stored with the crop the transform
// makes of it (SampleInfo.encoded): Batch.shape is the decoded batch's, and there are
// no pixels.
struct BatchContent {
  bool image = true;
  TransformSpec transform;
  std::vector<FieldSpec> fields;
  ImageDelivery delivery = ImageDelivery::kServer;

  bool pixels() const { return image && delivery == ImageDelivery::kServer; }
  bool encoded_images() const { return image && delivery == ImageDelivery::kEncoded; }
};

// One batch: the Batch message without its images, plus the image buffer
// (B x 3 x C x C bytes, uint8 NCHW, page-aligned; none for a batch without images). The buffer is
// counted in ServerStats::buffer_bytes for as long as the object lives, and holds its grant of
// batch memory (batch_memory.h) until the buffer is unmapped.
class AssembledBatch {
 public:
  // RESOURCE_EXHAUSTED (never an exception) when the buffer cannot be mapped. `crop`
  // 0: no image buffer (images() is null, image_bytes() 0).
  static absl::StatusOr<std::shared_ptr<AssembledBatch>> Create(int batch_size, int crop,
                                                                std::atomic<int64_t>* buffer_gauge,
                                                                BatchGrant grant = {});
  ~AssembledBatch();
  AssembledBatch(const AssembledBatch&) = delete;
  AssembledBatch& operator=(const AssembledBatch&) = delete;

  shardcast::v1::Batch& header() { return header_; }
  const shardcast::v1::Batch& header() const { return header_; }
  uint8_t* images() { return images_; }
  const uint8_t* images() const { return images_; }
  size_t image_bytes() const { return image_bytes_; }
  size_t sample_bytes() const { return sample_bytes_; }

  // Why this batch must not be sent (OK when it may): a sample's shard changed since
  // indexing (IsShardChanged). Set by the assembler before `done` runs; read after it.
  const absl::Status& failure() const { return failure_; }
  void set_failure(absl::Status failure) { failure_ = std::move(failure); }

  // By slot, the index's entry of each valid sample (key, label, members), looked up
  // once by Prepare (from memory or the shard's table) for the tasks that read it.
  std::vector<SampleEntry>& entries() { return entries_; }
  const std::vector<SampleEntry>& entries() const { return entries_; }

 private:
  AssembledBatch(size_t sample_bytes, size_t image_bytes, uint8_t* images,
                 std::atomic<int64_t>* buffer_gauge, BatchGrant grant);

  shardcast::v1::Batch header_;  // every field but `images`
  const size_t sample_bytes_;    // 3 * C * C
  const size_t image_bytes_;     // batch_size * sample_bytes_
  // Mapped (not malloc'ed) and, when the batch dies, kept for the next batch of the
  // same size in a small process-wide free list (at most kKeptBatchBuffers buffers) or
  // unmapped: the server's RSS follows the buffers it holds plus that list, instead of
  // malloc's arenas keeping their high-water mark, and a steady stream reuses warm pages
  // instead of faulting in fresh ones for every batch (batch_assembler.cc).
  uint8_t* const images_;
  std::atomic<int64_t>* const buffer_gauge_;  // not owned; may be null
  // Given back after the destructor gave the buffer up (members die after its body).
  BatchGrant grant_;
  absl::Status failure_;
  std::vector<SampleEntry> entries_;
};

// How many freed batch buffers the server keeps for reuse, and the largest it keeps.
inline constexpr int kKeptBatchBuffers = 4;
inline constexpr size_t kMaxKeptBatchBufferBytes = size_t{64} << 20;

// What the serve path refuses to decode, and the budget decodes share.
struct DecodeLimits {
  MemoryBudget* budget = nullptr;  // not owned; null = no server-wide budget
  int64_t max_member_bytes = 0;    // image members larger than this are not read; 0 = no limit
  // How long a read that fails with an error of the host (HostIoError) is retried.
  absl::Duration host_error_retry = absl::Seconds(20);
  // What that retry's backoff waits on (not owned, never null); tests pass a fake one.
  const util::Clock* clock = util::Clock::Real();
  // Encoded delivery: a random crop's JPEG is sent cut losslessly to the part its crop
  // reads (encoded_image.h), when that is smaller.
  bool lossless_cut = false;
};

// Thread-safe. REQUIRES: `dataset`, `pool`, `stats` and `limits.budget` outlive the
// assembler and every batch it has started.
//
// Members beside the image (BatchContent::fields) are read by range like the image and
// sent as stored: SampleInfo.fields holds one FieldValue per field (present = false for
// an optional one the sample lacks). The samples a plan holds were selected for the
// job (job_samples.h): each has its required fields, none over --max-member-bytes. A
// member is never substituted: a caption that cannot be read cannot be replaced by
// another, and none may go missing silently, so a failed read of one (after the same
// retry of the host's errors as the image's) fails the batch and ends the stream with
// that error (DATA_LOSS when the shard's bytes are not what the index says), naming the
// shard, the sample's key and the field. A batch without an image decodes nothing.
//
// A sample whose member cannot be read or decoded is replaced by a mid-gray image
// (every byte 128, a deterministic substitute that needs no other sample), keeps its
// label and key, and is flagged `substituted`; the failure is counted in
// ServerStats::decode_errors / substitutions and logged with shard, key and error.
// Padding entries (invalid SampleRefs) get a zero image, label -1, valid = false.
// Encoded delivery reads alike and decodes nothing (encoded_image.h): a sample is
// substituted (SampleInfo.encoded without data, flagged, counted, logged) for the
// reasons server delivery substitutes it before decoding: its member not read or
// over --max-member-bytes, its header unreadable or its geometry impossible, its
// decode buffers alone over the decode budget. Padding then carries no `encoded`.
// So is an image member over `limits.max_member_bytes` (not read; counted in
// ServerStats::images_over_member_limit) and an image whose decode buffers alone
// exceed the decode budget (not decoded; counted by the budget). Every decode waits
// for its bytes of the budget, so the decode threads together never hold more.
// A sample whose shard changed since indexing (IsShardChanged) is not substituted: the
// batch fails (AssembledBatch::failure), and the stream ends with that
// FAILED_PRECONDITION naming the shard, since every later sample of the shard would
// be as wrong. A read that fails with an error of the host, not of the data
// (HostIoError: EMFILE, EACCES, EIO...), is retried with backoff for
// `limits.host_error_retry` (each retry counted in ServerStats::shard_read_retries),
// then fails the batch likewise with that UNAVAILABLE naming the shard and the errno
// (a store's errors are HostIoErrors too, 403 and 404 included: common/remote/
// http_fetcher.h). Substitutes are for corrupt content only: of the read errors, only
// DATA_LOSS (the shard's bytes are not what the index says) is substituted; any other
// fails the batch with its status. No exception leaves a decode task: an
// allocation failure while reading or decoding one sample is that sample's error
// (substituted, counted, logged).
class BatchAssembler {
 public:
  BatchAssembler(const ServedDataset* dataset, DecodePool* pool, ServerStats* stats,
                 DecodeLimits limits = {});
  // A mixed job's datasets (SampleRef::dataset indexes them): each sample is read from
  // its own, and SampleInfo.dataset names it.
  struct Source {
    std::string name;
    const ServedDataset* data = nullptr;
  };
  // An assembler like this one (its pool, stats and limits) over a mixed job's datasets.
  // REQUIRES: each source outlives the new assembler and its batches.
  std::unique_ptr<BatchAssembler> ForMixture(std::vector<Source> sources) const;
  BatchAssembler(const BatchAssembler&) = delete;
  BatchAssembler& operator=(const BatchAssembler&) = delete;

  // Allocates the batch and fills its message fields (no I/O but the samples' lookups:
  // a shard's table read from the index cache when it is not in the table cache).
  // RESOURCE_EXHAUSTED when its buffer cannot be allocated; a lookup's error
  // (ServedDataset::Lookup: a host error once retried) naming the shard. The batch keeps `grant`
  // (its reservation of batch memory) for its life.
  // `entries` (may be null: looked up here) are LookUp's for `planned`, moved into the
  // batch: a caller that also asks BatchBytes looks each sample up once for both.
  absl::StatusOr<std::shared_ptr<AssembledBatch>> Prepare(
      const PlannedBatch& planned, const BatchContent& content, BatchGrant grant = {},
      std::vector<SampleEntry>* entries = nullptr);

  // `planned`'s samples' entries (by position; default ones for padding), each looked
  // up once, a host error retried (ServedDataset::LookupRetrying); a lookup's error
  // naming the shard, as Prepare's.
  absl::Status LookUp(const PlannedBatch& planned, std::vector<SampleEntry>* entries) const;

  // Queues one task per valid sample of `batch` (made by Prepare from `planned` and
  // `content`). `done(complete)` runs exactly once when every sample is finished,
  // on a pool thread, or on the calling thread when there is nothing to decode;
  // `complete` is false when `cancelled` was set meanwhile (remaining samples are then
  // skipped without work and the buffer contents are unspecified).
  void Launch(std::shared_ptr<AssembledBatch> batch, const PlannedBatch& planned,
              std::shared_ptr<const BatchContent> content,
              std::shared_ptr<const std::atomic<bool>> cancelled,
              std::function<void(bool complete)> done);

  // The bytes `planned` takes in batch memory with `content`: its pixels and the
  // members its valid samples send (SentMemberBytes: fields, encoded images), from
  // `entries`, LookUp's for `planned`: the samples are looked up once, for this and for
  // Prepare.
  int64_t BatchBytes(const PlannedBatch& planned, const BatchContent& content,
                     const std::vector<SampleEntry>& entries) const;

  // Tells the dataset's reader that the members of `planned` that `content` reads (the
  // image, the fields) will be read soon (MemberReader::Prefetch), after loading the
  // tables of its shards into the table cache (their samples released to the index
  // cache): the read-ahead, so that Prepare finds them there. Blocks only on those
  // tables' reads.
  void Prefetch(const PlannedBatch& planned, const BatchContent& content);

  const ServedDataset& dataset() const { return *datasets_[0]; }

 private:
  BatchAssembler(std::vector<const ServedDataset*> datasets, std::vector<std::string> names,
                 DecodePool* pool, ServerStats* stats, DecodeLimits limits);
  // The dataset `ref` is a sample of.
  const ServedDataset& data(const SampleRef& ref) const {
    return *datasets_[static_cast<size_t>(ref.dataset)];
  }
  // The positions of `planned`'s valid samples in the order to look them up: by
  // dataset, shard and index when a dataset reads its samples from tables, so that each
  // shard's samples follow one another in increasing order and each decodes on from
  // the one before (ServedDataset::TableHint) instead of from its restart; in the
  // batch's order otherwise (a copy from memory costs the same in any order).
  std::vector<int> LookupOrder(const PlannedBatch& planned) const;
  struct PendingBatch;
  // The sample's image into its slot (pixels, or SampleInfo.encoded), or its
  // substitute, or the batch's failure.
  void AssembleImage(PendingBatch* pending, int slot, const SampleRef& ref);
  // The substitute (every byte 128, or an EncodedImage without data) in `slot`, flagged.
  static void WriteSubstitute(PendingBatch* pending, int slot);
  // Reads the sample's fields into its SampleInfo. A failed read is the batch's failure
  // (named: shard, key, field); returns false then.
  bool ReadFields(PendingBatch* pending, int slot, const SampleRef& ref);
  // The member's bytes, a HostIoError retried as the class comment says.
  absl::StatusOr<std::string> ReadRetryingHostErrors(const PendingBatch& pending,
                                                     const ServedDataset& source, uint32_t shard,
                                                     const MemberRef& member);
  // The UNAVAILABLE a read retried until `retry` gave up (or the stream was cancelled)
  // ends with: `last`'s message and marks, and how long it was retried.
  absl::Status GivenUp(const absl::Status& last, const util::RetryPolicy& retry) const;
  // The sample's image member, unless it is over --max-member-bytes (then not read).
  // `*read_failed` is set when the error is the read's.
  absl::StatusOr<std::string> ReadImage(const PendingBatch& pending, const SampleRef& ref,
                                        const SampleEntry& entry, bool* read_failed);
  // Reads and decodes one sample into `out` (3 x crop x crop bytes), or (encoded
  // delivery) reads it into `out` as EncodeImage does. `*read_failed` is set when the
  // error is the read's (not the decode's or the header's).
  absl::Status ReadAndDecode(const PendingBatch& pending, const SampleRef& ref,
                             const SampleEntry& entry, uint8_t* out, bool* read_failed);
  absl::Status ReadAndEncode(const PendingBatch& pending, const SampleRef& ref,
                             const SampleEntry& entry, shardcast::v1::EncodedImage* out,
                             bool* read_failed);

  // One for a single-dataset job; a mixed job's in its order, with their names (for
  // SampleInfo.dataset; empty for a single-dataset job).
  const std::vector<const ServedDataset*> datasets_;
  const std::vector<std::string> names_;
  DecodePool* const pool_;
  ServerStats* const stats_;
  const DecodeLimits limits_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_BATCH_ASSEMBLER_H_

// Batch assembly on the decode pool (see batch_assembler.h).
#include "server/assembly/batch_assembler.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/plan/job_samples.h"
#include "common/shards/shard_reader.h"
#include "common/util/retry_policy.h"
#include "common/util/utf8.h"
#include "server/assembly/encoded_image.h"
#include "server/base/log.h"

namespace shardcast::server {

namespace {
// The substitute for a sample that fails to read or decode.
constexpr uint8_t kSubstituteByte = 128;

// Whether a read failed because of the shard's bytes (a member past the end of what was
// indexed, a gzip stream that no longer inflates: DATA_LOSS), the only read failures a
// substitute may stand for. Every other (the host's, a store's 403 or 404, a changed
// shard, a kind of error added later) fails the batch: positively bad data only, so a
// new error of a reader can never turn into silent grey samples.
bool IsBadData(const absl::Status& status) {
  return absl::IsDataLoss(status) && !IsHostIoError(status) && !IsShardChanged(status);
}

// Members an entry's allocation is made for ahead of its lookup (LookUp): a WebDataset
// sample's jpg, txt, json and cls; one with more grows it.
constexpr size_t kMembersReserved = 4;

// Freed batch buffers kept for the next batch of the same size. A fresh mapping costs
// far more than its page faults: on this project's VMs (free pages reported to the
// host) writing a just-mapped 4.8 MB buffer ran at 0.5-0.7 GB/s against 30 GB/s for a
// reused one (docs/BENCHMARKS.md), a third of the server's CPU per image. Bounded, so
// RSS stays within a few batches of what live batches hold.
class BufferRecycler {
 public:
  static BufferRecycler& Get() {
    static BufferRecycler* recycler = new BufferRecycler;  // never destroyed: batches
    return *recycler;                                      // may die during exit
  }

  // A kept buffer of exactly `bytes`, or null.
  void* Take(size_t bytes) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].second == bytes) {
        void* p = kept_[i].first;
        kept_[i] = kept_.back();
        kept_.pop_back();
        return p;
      }
    }
    return nullptr;
  }

  // Keeps the buffer when there is room; when the list is full, a buffer of another
  // size makes room for it (the current job's size is what the list should hold), else
  // it is unmapped.
  void Give(void* p, size_t bytes) {
    void* unmap = p;
    size_t unmap_bytes = bytes;
    if (bytes <= kMaxKeptBatchBufferBytes) {
      absl::MutexLock lock(&mu_);
      if (kept_.size() < static_cast<size_t>(kKeptBatchBuffers)) {
        kept_.emplace_back(p, bytes);
        return;
      }
      for (auto& kept : kept_) {
        if (kept.second != bytes) {
          unmap = kept.first;
          unmap_bytes = kept.second;
          kept = {p, bytes};
          break;
        }
      }
    }
    munmap(unmap, unmap_bytes);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<void*, size_t>> kept_ ABSL_GUARDED_BY(mu_);
};
}  // namespace

absl::StatusOr<std::shared_ptr<AssembledBatch>> AssembledBatch::Create(
    int batch_size, int crop, std::atomic<int64_t>* buffer_gauge, BatchGrant grant) {
  const size_t sample_bytes = 3 * static_cast<size_t>(crop) * static_cast<size_t>(crop);
  const size_t image_bytes = static_cast<size_t>(batch_size) * sample_bytes;
  if (image_bytes == 0) {
    return std::shared_ptr<AssembledBatch>(
        new AssembledBatch(0, 0, nullptr, buffer_gauge, std::move(grant)));
  }
  const size_t mapped_bytes = std::max<size_t>(image_bytes, 1);
  // Every byte is written by decode, substitution or padding, so a reused buffer's old
  // pixels never go out.
  if (void* kept = BufferRecycler::Get().Take(mapped_bytes); kept != nullptr) {
    return std::shared_ptr<AssembledBatch>(new AssembledBatch(
        sample_bytes, image_bytes, static_cast<uint8_t*>(kept), buffer_gauge, std::move(grant)));
  }
  // MAP_POPULATE faults the pages in with one call instead of one fault per page while
  // decoding.
  void* mapped = mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mapped == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", image_bytes, " bytes for a batch of ", batch_size,
                     " images of 3x", crop, "x", crop, ": ", std::strerror(errno)));
  }
  return std::shared_ptr<AssembledBatch>(new AssembledBatch(
      sample_bytes, image_bytes, static_cast<uint8_t*>(mapped), buffer_gauge, std::move(grant)));
}

AssembledBatch::AssembledBatch(size_t sample_bytes, size_t image_bytes, uint8_t* images,
                               std::atomic<int64_t>* buffer_gauge, BatchGrant grant)
    : sample_bytes_(sample_bytes),
      image_bytes_(image_bytes),
      images_(images),
      buffer_gauge_(buffer_gauge),
      grant_(std::move(grant)) {
  if (buffer_gauge_ != nullptr) buffer_gauge_->fetch_add(static_cast<int64_t>(image_bytes_));
}

AssembledBatch::~AssembledBatch() {
  if (images_ != nullptr) BufferRecycler::Get().Give(images_, std::max<size_t>(image_bytes_, 1));
  if (buffer_gauge_ != nullptr) buffer_gauge_->fetch_sub(static_cast<int64_t>(image_bytes_));
}

struct BatchAssembler::PendingBatch {
  std::shared_ptr<AssembledBatch> batch;
  std::shared_ptr<const BatchContent> content;
  std::shared_ptr<const std::atomic<bool>> cancelled;
  std::function<void(bool)> done;
  std::atomic<int> remaining{0};
  std::vector<char> substituted;  // per slot; each written by one task only
  absl::Mutex failure_mu;
  absl::Status failure ABSL_GUARDED_BY(failure_mu);  // the first changed-shard error

  // Called by whoever finishes the last sample.
  void Finish() {
    const bool complete = !cancelled->load(std::memory_order_acquire);
    {
      absl::MutexLock lock(&failure_mu);
      if (!failure.ok()) batch->set_failure(failure);
    }
    if (complete) {
      for (size_t i = 0; i < substituted.size(); ++i) {
        if (substituted[i])
          batch->header().mutable_samples(static_cast<int>(i))->set_substituted(true);
      }
    }
    auto callback = std::move(done);
    callback(complete);
  }
};

BatchAssembler::BatchAssembler(const ServedDataset* dataset, DecodePool* pool, ServerStats* stats,
                               DecodeLimits limits)
    : BatchAssembler(std::vector<const ServedDataset*>{dataset}, {}, pool, stats, limits) {}

BatchAssembler::BatchAssembler(std::vector<const ServedDataset*> datasets,
                               std::vector<std::string> names, DecodePool* pool, ServerStats* stats,
                               DecodeLimits limits)
    : datasets_(std::move(datasets)),
      names_(std::move(names)),
      pool_(pool),
      stats_(stats),
      limits_(limits) {}

std::unique_ptr<BatchAssembler> BatchAssembler::ForMixture(std::vector<Source> sources) const {
  std::vector<const ServedDataset*> datasets;
  std::vector<std::string> names;
  for (Source& source : sources) {
    datasets.push_back(source.data);
    names.push_back(std::move(source.name));
  }
  return std::unique_ptr<BatchAssembler>(
      new BatchAssembler(std::move(datasets), std::move(names), pool_, stats_, limits_));
}

std::vector<int> BatchAssembler::LookupOrder(const PlannedBatch& planned) const {
  const bool tables = std::any_of(datasets_.begin(), datasets_.end(),
                                  [](const ServedDataset* d) { return d->samples_in_tables(); });
  std::vector<int> order;
  order.reserve(planned.samples.size());
  if (!tables) {
    for (size_t i = 0; i < planned.samples.size(); ++i) {
      if (planned.samples[i].valid()) order.push_back(static_cast<int>(i));
    }
    return order;
  }
  // Sorted as pairs of integers, the position riding in the low bits, not positions
  // compared through their SampleRefs: contiguous keys, no indirection (the sort is a
  // few percent of a members-only server's CPU either way, hence once a batch).
  std::vector<std::pair<uint64_t, uint64_t>> keys;
  keys.reserve(planned.samples.size());
  for (size_t i = 0; i < planned.samples.size(); ++i) {
    const SampleRef& ref = planned.samples[i];
    if (!ref.valid()) continue;
    keys.emplace_back(
        uint64_t{static_cast<uint32_t>(ref.dataset)} << 32 | static_cast<uint32_t>(ref.shard),
        uint64_t{static_cast<uint32_t>(ref.index)} << 32 | i);
  }
  if (!std::is_sorted(keys.begin(), keys.end())) std::sort(keys.begin(), keys.end());
  for (const auto& key : keys) order.push_back(static_cast<int>(key.second & 0xffffffffu));
  return order;
}

absl::Status BatchAssembler::LookUp(const PlannedBatch& planned,
                                    std::vector<SampleEntry>* entries) const {
  entries->resize(planned.samples.size());
  const std::vector<int> order = LookupOrder(planned);
  if (!std::is_sorted(order.begin(), order.end())) {
    // Looked up out of the batch's order, the entries' members would lie on the heap
    // in that order, and everything after (BatchBytes, the sample tasks) reads them in
    // the batch's: allocated here in the batch's order, they are read the way they lie
    // (perf: FieldMembers took 4.6% of a members-only server's CPU, 1.7% so).
    for (SampleEntry& entry : *entries) entry.members.reserve(kMembersReserved);
  }
  // One hint per dataset: shard numbers of a mixture's datasets overlap.
  std::vector<ServedDataset::TableHint> hints(datasets_.size());
  for (int i : order) {
    const SampleRef& ref = planned.samples[i];
    const ServedDataset& data = this->data(ref);
    if (absl::Status found = data.LookupRetrying(
            static_cast<uint32_t>(ref.shard), static_cast<uint32_t>(ref.index),
            &(*entries)[static_cast<size_t>(i)], &hints[static_cast<size_t>(ref.dataset)]);
        !found.ok()) {
      absl::Status failure(
          found.code(),
          absl::StrCat("sample ", ref.index, " of shard ",
                       LogSafe(data.index().shards[ref.shard].path, 256), ": ", found.message()));
      found.ForEachPayload([&failure](absl::string_view type, const absl::Cord& value) {
        failure.SetPayload(type, value);  // a HostIoError stays one
      });
      return failure;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<AssembledBatch>> BatchAssembler::Prepare(
    const PlannedBatch& planned, const BatchContent& content, BatchGrant grant,
    std::vector<SampleEntry>* entries) {
  const int batch_size = static_cast<int>(planned.samples.size());
  const int crop = content.pixels() ? content.transform.crop : 0;
  absl::StatusOr<std::shared_ptr<AssembledBatch>> created = AssembledBatch::Create(
      batch_size, crop, stats_ ? &stats_->buffer_bytes : nullptr, std::move(grant));
  if (!created.ok()) return created.status();
  std::shared_ptr<AssembledBatch> batch = *std::move(created);
  shardcast::v1::Batch& header = batch->header();
  header.set_epoch(planned.epoch);
  header.set_index(planned.index);
  if (content.image) {
    const int64_t side = content.transform.crop;  // encoded: the decoded batch's shape
    for (int64_t dim : {int64_t{batch_size}, int64_t{3}, side, side}) {
      header.add_shape(dim);
    }
  }
  header.mutable_labels()->Reserve(batch_size);
  header.mutable_samples()->Reserve(batch_size);
  if (entries != nullptr && entries->size() == planned.samples.size()) {
    batch->entries().swap(*entries);
  } else if (absl::Status found = LookUp(planned, &batch->entries()); !found.ok()) {
    return found;
  }
  for (int i = 0; i < batch_size; ++i) {
    const SampleRef& ref = planned.samples[i];
    shardcast::v1::SampleInfo* info = header.add_samples();
    if (!ref.valid()) {
      header.add_labels(-1);
      info->set_shard(-1);
      info->set_index_in_shard(-1);
      info->set_valid(false);
      if (content.pixels()) {
        std::memset(batch->images() + i * batch->sample_bytes(), 0, batch->sample_bytes());
      }
      continue;
    }
    const SampleEntry& entry = batch->entries()[static_cast<size_t>(i)];
    header.add_labels(entry.label);
    if (!names_.empty()) info->set_dataset(names_[static_cast<size_t>(ref.dataset)]);
    // proto3 strings must be UTF-8: a key that is not (a Latin-1 member name) is
    // escaped one-to-one (common/util/utf8.h) so the client can parse the batch.
    info->set_key(EscapeToUtf8(entry.key));
    info->set_shard(ref.shard);
    info->set_index_in_shard(ref.index);
    info->set_valid(true);
    // Filled by the sample's task; added here so that tasks only write their own.
    for (size_t f = 0; f < content.fields.size(); ++f) info->add_fields();
  }
  return batch;
}

void BatchAssembler::Launch(std::shared_ptr<AssembledBatch> batch, const PlannedBatch& planned,
                            std::shared_ptr<const BatchContent> content,
                            std::shared_ptr<const std::atomic<bool>> cancelled,
                            std::function<void(bool complete)> done) {
  auto pending = std::make_shared<PendingBatch>();
  pending->batch = std::move(batch);
  pending->content = std::move(content);
  pending->cancelled = std::move(cancelled);
  pending->done = std::move(done);
  pending->substituted.assign(planned.samples.size(), 0);
  int valid = 0;
  for (const SampleRef& ref : planned.samples) valid += ref.valid() ? 1 : 0;
  if (valid == 0) {
    pending->Finish();
    return;
  }
  pending->remaining.store(valid, std::memory_order_relaxed);
  for (size_t i = 0; i < planned.samples.size(); ++i) {
    const SampleRef ref = planned.samples[i];
    if (!ref.valid()) continue;
    pool_->Submit([this, pending, slot = static_cast<int>(i), ref] {
      if (!pending->cancelled->load(std::memory_order_relaxed)) {
        // DecodeSample turns its failures into substitutes; whatever escapes it all
        // the same must not skip the count below, or the batch would never finish.
        try {
          if (ReadFields(pending.get(), slot, ref) && pending->content->image) {
            AssembleImage(pending.get(), slot, ref);
          }
        } catch (...) {
          if (pending->content->image) WriteSubstitute(pending.get(), slot);
        }
      }
      if (pending->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) pending->Finish();
    });
  }
}

int64_t BatchAssembler::BatchBytes(const PlannedBatch& planned, const BatchContent& content,
                                   const std::vector<SampleEntry>& entries) const {
  const int64_t pixels =
      content.pixels() ? int64_t{3} * content.transform.crop * content.transform.crop : 0;
  int64_t bytes = pixels * static_cast<int64_t>(planned.samples.size());
  if (content.fields.empty() && !content.encoded_images()) return bytes;
  for (size_t i = 0; i < planned.samples.size() && i < entries.size(); ++i) {
    if (!planned.samples[i].valid()) continue;
    bytes += static_cast<int64_t>(SentMemberBytes(
        entries[i], content.fields, content.encoded_images(), limits_.max_member_bytes));
  }
  return bytes;
}

void BatchAssembler::Prefetch(const PlannedBatch& planned, const BatchContent& content) {
  // Each dataset's reader is told of its own members (one dataset but in a mixed job).
  // The shards' tables first (each once; a no-op with the samples in memory), so that
  // the lookups below and Prepare's find them in the table cache. A shard whose table
  // cannot be read is skipped here: Prepare reports it.
  // Only a reader that reads ahead is told of members (below): the order is for it.
  const bool reads_ahead =
      std::any_of(datasets_.begin(), datasets_.end(),
                  [](const ServedDataset* d) { return d->reader().reads_ahead(); });
  const std::vector<int> order = reads_ahead ? LookupOrder(planned) : std::vector<int>();
  for (size_t d = 0; d < datasets_.size(); ++d) {
    const ServedDataset& data = *datasets_[d];
    std::vector<int32_t> unreadable;
    int32_t last_shard = -1;
    for (const SampleRef& ref : planned.samples) {
      if (!ref.valid() || static_cast<size_t>(ref.dataset) != d || ref.shard == last_shard) {
        continue;
      }
      last_shard = ref.shard;
      if (!data.PrefetchTable(static_cast<uint32_t>(ref.shard)).ok()) {
        unreadable.push_back(ref.shard);
      }
    }
    // A local reader ignores the announcement: looking the samples up for it would
    // be a third lookup of each (BatchBytes and Prepare make the others) for nothing.
    if (!data.reader().reads_ahead()) continue;
    std::vector<MemberLocation> members;
    members.reserve(planned.samples.size() * (1 + content.fields.size()));
    SampleEntry entry;
    ServedDataset::TableHint hint;
    for (int i : order) {
      const SampleRef& ref = planned.samples[i];
      if (static_cast<size_t>(ref.dataset) != d) continue;
      const uint32_t shard = static_cast<uint32_t>(ref.shard);
      // A failed lookup is Prepare's to report; the read-ahead is only a hint.
      if (std::find(unreadable.begin(), unreadable.end(), ref.shard) != unreadable.end() ||
          !data.Lookup(shard, static_cast<uint32_t>(ref.index), &entry, &hint).ok()) {
        continue;
      }
      for (int32_t member : FieldMembers(entry, content.fields)) {
        if (member != kNoFieldMember) {
          members.push_back(MemberLocation{shard, entry.members[member]});
        }
      }
      if (content.image && entry.image_member < entry.members.size()) {
        members.push_back(MemberLocation{shard, entry.members[entry.image_member]});
      }
    }
    if (!members.empty()) datasets_[d]->reader().Prefetch(members);
  }
}

bool BatchAssembler::ReadFields(PendingBatch* pending, int slot, const SampleRef& ref) {
  const std::vector<FieldSpec>& fields = pending->content->fields;
  if (fields.empty()) return true;
  const ShardInfo& shard = data(ref).index().shards[ref.shard];
  const SampleEntry& entry = pending->batch->entries()[static_cast<size_t>(slot)];
  const std::vector<int32_t> members = FieldMembers(entry, fields);
  shardcast::v1::SampleInfo* info = pending->batch->header().mutable_samples(slot);
  for (size_t f = 0; f < fields.size(); ++f) {
    if (members[f] == kNoFieldMember) continue;  // optional: selection left out the rest
    const MemberRef& member = entry.members[members[f]];
    absl::StatusOr<std::string> bytes;
    try {
      bytes = ReadRetryingHostErrors(*pending, data(ref), static_cast<uint32_t>(ref.shard), member);
    } catch (const std::bad_alloc&) {
      bytes = absl::ResourceExhaustedError(
          absl::StrCat("out of memory while reading ", member.size, " bytes"));
    }
    if (!bytes.ok()) {
      absl::Status failure(
          bytes.status().code(),
          absl::StrCat("field '", fields[f].Name(), "' of sample '", LogSafe(entry.key),
                       "' in shard ", LogSafe(shard.path, 256), ": ", bytes.status().message()));
      bytes.status().ForEachPayload([&failure](absl::string_view type, const absl::Cord& value) {
        failure.SetPayload(type, value);  // a HostIoError or a changed shard stays one
      });
      absl::MutexLock lock(&pending->failure_mu);
      if (pending->failure.ok()) pending->failure = std::move(failure);
      return false;
    }
    shardcast::v1::FieldValue* value = info->mutable_fields(static_cast<int>(f));
    value->set_present(true);
    value->set_ext(EscapeToUtf8(member.ext));
    *value->mutable_data() = *std::move(bytes);
  }
  return true;
}

absl::StatusOr<std::string> BatchAssembler::ReadRetryingHostErrors(const PendingBatch& pending,
                                                                   const ServedDataset& source,
                                                                   uint32_t shard,
                                                                   const MemberRef& member) {
  // From a blink (a descriptor freed a moment later) to a remount: short first, then
  // at most a second apart, for --shard-read-retry. The stream's cancel (a client gone,
  // a drain, the server stopping) ends a wait at once: a decode thread is never held.
  absl::StatusOr<std::string> read = source.reader().ReadMember(shard, member);
  if (read.ok() || !IsHostIoError(read.status())) return read;  // (every read but a few)
  util::RetryOptions options;
  options.first_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Seconds(1);
  options.window = limits_.host_error_retry;
  util::RetryPolicy retry(options, limits_.clock);
  const util::CancelToken cancel(pending.cancelled.get());
  while (true) {
    const util::RetryPolicy::Decision next =
        cancel.cancelled() ? util::RetryPolicy::Decision{util::RetryPolicy::Verdict::kDeadline}
                           : retry.AfterFailure();
    if (next.verdict != util::RetryPolicy::Verdict::kRetry) return GivenUp(read.status(), retry);
    if (retry.retries() == 1) {
      LogWarning("assembler", absl::StrCat("retrying a read the host failed: ",
                                           LogSafe(read.status().message(), 512)));
    }
    if (stats_ != nullptr) stats_->shard_read_retries.fetch_add(1, std::memory_order_relaxed);
    if (!retry.Wait(next.wait, &cancel)) return GivenUp(read.status(), retry);
    read = source.reader().ReadMember(shard, member);
    if (read.ok() || !IsHostIoError(read.status())) return read;
  }
}

absl::Status BatchAssembler::GivenUp(const absl::Status& last,
                                     const util::RetryPolicy& retry) const {
  // UNAVAILABLE whatever the store's answer was (its 403 or 404 is in the message): to
  // a client, the server cannot read its data now, as with a failing disk; a
  // PERMISSION_DENIED or NOT_FOUND would say its own token or job was refused.
  absl::Status given_up(
      absl::StatusCode::kUnavailable,
      absl::StrCat(last.message(), "; retried ", retry.retries(), " times for ",
                   absl::FormatDuration(limits_.host_error_retry), " (--shard-read-retry)"));
  last.ForEachPayload([&given_up](absl::string_view type, const absl::Cord& value) {
    given_up.SetPayload(type, value);  // still a HostIoError
  });
  return given_up;
}

absl::StatusOr<std::string> BatchAssembler::ReadImage(const PendingBatch& pending,
                                                      const SampleRef& ref,
                                                      const SampleEntry& entry, bool* read_failed) {
  if (entry.image_member >= entry.members.size()) {
    return absl::InternalError("sample has no image member in the index");
  }
  const MemberRef& member = entry.members[entry.image_member];
  if (limits_.max_member_bytes > 0 &&
      member.size > static_cast<uint64_t>(limits_.max_member_bytes)) {
    if (stats_ != nullptr) stats_->images_over_member_limit.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat("image member of ", member.size,
                                                     " bytes is over --max-member-bytes ",
                                                     limits_.max_member_bytes, "; not read"));
  }
  absl::StatusOr<std::string> encoded =
      ReadRetryingHostErrors(pending, data(ref), static_cast<uint32_t>(ref.shard), member);
  if (!encoded.ok()) *read_failed = true;
  return encoded;
}

absl::Status BatchAssembler::ReadAndDecode(const PendingBatch& pending, const SampleRef& ref,
                                           const SampleEntry& entry, uint8_t* out,
                                           bool* read_failed) {
  // The read buffer and the decoder allocate; running out of memory there is this
  // sample's failure, not the process's (an exception must not leave a pool task).
  try {
    absl::StatusOr<std::string> encoded = ReadImage(pending, ref, entry, read_failed);
    if (!encoded.ok()) return encoded.status();
    return DecodeAndTransform(*encoded, pending.content->transform, ref.augment_seed, out,
                              limits_.budget);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while reading or decoding");
  }
}

absl::Status BatchAssembler::ReadAndEncode(const PendingBatch& pending, const SampleRef& ref,
                                           const SampleEntry& entry,
                                           shardcast::v1::EncodedImage* out, bool* read_failed) {
  try {
    absl::StatusOr<std::string> encoded = ReadImage(pending, ref, entry, read_failed);
    if (!encoded.ok()) return encoded.status();
    return EncodeImage(*std::move(encoded), pending.content->transform, ref.augment_seed,
                       limits_.budget, limits_.lossless_cut, out);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while reading");
  }
}

void BatchAssembler::WriteSubstitute(PendingBatch* pending, int slot) {
  AssembledBatch& batch = *pending->batch;
  if (pending->content->pixels()) {
    std::memset(batch.images() + slot * batch.sample_bytes(), kSubstituteByte,
                batch.sample_bytes());
  } else {
    shardcast::v1::EncodedImage* encoded = batch.header().mutable_samples(slot)->mutable_encoded();
    encoded->Clear();
    encoded->set_output_size(pending->content->transform.crop);
  }
  pending->substituted[slot] = 1;
}

void BatchAssembler::AssembleImage(PendingBatch* pending, int slot, const SampleRef& ref) {
  AssembledBatch& batch = *pending->batch;
  // The histogram's decode time includes the read and any wait for decode memory: the
  // time one sample holds a decode thread. Real time: it measures work, decides nothing.
  const absl::Time start = absl::Now();
  bool read_failed = false;
  const SampleEntry& entry = batch.entries()[static_cast<size_t>(slot)];
  const absl::Status status =
      pending->content->pixels()
          ? ReadAndDecode(*pending, ref, entry, batch.images() + slot * batch.sample_bytes(),
                          &read_failed)
          : ReadAndEncode(*pending, ref, entry,
                          batch.header().mutable_samples(slot)->mutable_encoded(), &read_failed);
  if (stats_ != nullptr) stats_->decode_time.Observe(absl::Now() - start);
  if (status.ok()) return;
  if (read_failed && !IsBadData(status)) {  // the host's, the store's, a changed shard
    absl::MutexLock lock(&pending->failure_mu);
    if (pending->failure.ok()) pending->failure = status;
    return;
  }
  WriteSubstitute(pending, slot);
  if (stats_ != nullptr) {
    stats_->decode_errors.fetch_add(1, std::memory_order_relaxed);
    stats_->substitutions.fetch_add(1, std::memory_order_relaxed);
    if (IsUnsupportedImageFormat(status)) {
      stats_->images_unsupported_format.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const ShardInfo& shard = data(ref).index().shards[ref.shard];
  LogWarning("assembler",
             absl::StrCat("substituted sample: shard ", shard.path, " key '", LogSafe(entry.key),
                          "' (epoch ", batch.header().epoch(), " batch ", batch.header().index(),
                          " slot ", slot, "): ", status.ToString()));
}

}  // namespace shardcast::server

// Encoded batches decoded on the client's threads (see encoded_batch_decoder.h).
#include "client/decode/encoded_batch_decoder.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/decode/client_decode_memory.h"
#include "common/image/image_transform.h"
#include "proto/encoded_image_proto.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// Server delivery's substitute for an image it could not decode, and its padding.
constexpr uint8_t kSubstituteByte = 128;
constexpr uint8_t kPaddingByte = 0;

int DefaultThreads() {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hardware, 1, kMaxDefaultDecodeThreads);
}

}  // namespace

class EncodedBatchDecoder::Impl {
 public:
  explicit Impl(const EncodedBatchDecoderOptions& options)
      : options_(options),
        memory_(ClientDecodeMemoryOptions(options.max_decode_memory_bytes,
                                          "the client's decode memory limit")) {
    // Freed decode buffers must leave the process for memory_ to bound it as a whole.
    PinMallocMmapThreshold();
    const int n = options.threads > 0 ? options.threads : DefaultThreads();
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      quitting_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

  int threads() const { return static_cast<int>(threads_.size()); }

  int64_t substituted() const {
    absl::MutexLock lock(&mu_);
    return substituted_;
  }

  std::vector<DecodeFailure> Decode(v1::Batch* batch, uint8_t* out) {
    absl::MutexLock one_batch(&batch_mu_);
    const int64_t c = batch->shape_size() == 4 ? batch->shape(3) : 0;
    Job job{batch, out, 3 * c * c, batch->samples_size()};
    absl::MutexLock lock(&mu_);
    job_ = &job;
    mu_.Await(absl::Condition(
        +[](Job* j) { return j->done == j->samples; }, &job));
    job_ = nullptr;
    std::vector<DecodeFailure> failures;
    for (int i = 0; i < job.samples; ++i) {
      if (job.errors[i].ok()) continue;
      v1::SampleInfo* info = batch->mutable_samples(i);
      info->set_substituted(true);
      failures.push_back(
          {i, absl::StrFormat("shard %d key '%s': %s", info->shard(), absl::CHexEscape(info->key()),
                              job.errors[i].message())});
    }
    substituted_ += static_cast<int64_t>(failures.size());
    return failures;
  }

 private:
  struct Job {
    Job(const v1::Batch* b, uint8_t* o, int64_t bytes, int n)
        : batch(b), out(o), sample_bytes(bytes), samples(n), errors(n) {}
    const v1::Batch* batch;
    uint8_t* out;
    int64_t sample_bytes;
    int samples;
    int next = 0;  // the first sample no thread took
    int done = 0;
    std::vector<absl::Status> errors;  // per sample: why its decode failed here
  };

  // A pool thread: takes the current batch's samples one at a time until none is left.
  void Work() {
    mu_.Lock();
    while (true) {
      mu_.Await(absl::Condition(this, &Impl::HasWorkOrQuits));
      if (quitting_) break;
      Job* job = job_;
      const int i = job->next++;
      mu_.Unlock();
      absl::Status status =
          DecodeSample(job->batch->samples(i), job->sample_bytes, job->out + i * job->sample_bytes);
      mu_.Lock();
      job->errors[i] = std::move(status);
      ++job->done;
    }
    mu_.Unlock();
  }

  bool HasWorkOrQuits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return quitting_ || (job_ != nullptr && job_->next < job_->samples);
  }

  // One sample's pixels: its error when this client could not decode it (the
  // substitute is then written).
  absl::Status DecodeSample(const v1::SampleInfo& info, int64_t bytes, uint8_t* out) {
    if (!info.valid()) {
      std::memset(out, kPaddingByte, bytes);
      return absl::OkStatus();
    }
    const v1::EncodedImage& encoded = info.encoded();
    if (encoded.data().empty()) {  // the server's substitute (CheckBatch: it says so)
      std::memset(out, kSubstituteByte, bytes);
      return absl::OkStatus();
    }
    const std::optional<SourceWindow> cut = CutFromWire(encoded);
    absl::Status status =
        DecodeWithCrop(encoded.data(), CropFromWire(encoded, options_.mode), options_.dct_scaling,
                       out, &memory_, cut.has_value() ? &*cut : nullptr);
    if (!status.ok()) std::memset(out, kSubstituteByte, bytes);
    return status;
  }

  const EncodedBatchDecoderOptions options_;
  MemoryBudget memory_;   // max_decode_memory
  absl::Mutex batch_mu_;  // one Decode at a time
  mutable absl::Mutex mu_;
  Job* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool quitting_ ABSL_GUARDED_BY(mu_) = false;
  int64_t substituted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

EncodedBatchDecoder::EncodedBatchDecoder(const EncodedBatchDecoderOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
EncodedBatchDecoder::~EncodedBatchDecoder() = default;

std::vector<DecodeFailure> EncodedBatchDecoder::Decode(v1::Batch* batch, uint8_t* out) {
  return impl_->Decode(batch, out);
}
int EncodedBatchDecoder::threads() const { return impl_->threads(); }
int64_t EncodedBatchDecoder::substituted() const { return impl_->substituted(); }

}  // namespace shardcast::client

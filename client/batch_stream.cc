// BatchStream: RankFeed's batches as torch tensors (see batch_stream.h).
#include "client/batch_stream.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/plan/field_spec.h"

namespace shardcast {

absl::StatusOr<std::unique_ptr<BatchStream>> BatchStream::Connect(BatchStreamOptions options) {
  if (options.mean.size() != 3 || options.std.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mean and std need 3 values (RGB), got %d and %d", options.mean.size(),
                        options.std.size()));
  }
  for (double s : options.std) {
    if (!(s > 0)) return absl::InvalidArgumentError(absl::StrCat("std must be > 0, got ", s));
  }
  if (options.device.is_cuda() && !torch::cuda::is_available()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %s requested, but this LibTorch has no CUDA or sees no GPU (see README: "
        "Building with CUDA)",
        options.device.str()));
  }
  absl::StatusOr<std::unique_ptr<client::RankFeed>> stream = client::RankFeed::Connect(options);
  if (!stream.ok()) return stream.status();
  if (const client::Registration& r = (*stream)->registration(); r.image_shape.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job '%s' on dataset '%s' is served without images (fields [%s] alone): BatchStream "
        "hands out image tensors; read it with RankStream (each sample's "
        "header().samples(i).fields()) or the Python Loader (image=False)",
        options.job.job_id, r.dataset, FieldSpecsString(r.config.fields)));
  }
  return std::unique_ptr<BatchStream>(new BatchStream(std::move(options), *std::move(stream)));
}

BatchStream::BatchStream(BatchStreamOptions options, std::unique_ptr<client::RankFeed> stream)
    : options_(std::move(options)), stream_(std::move(stream)) {}
BatchStream::~BatchStream() = default;

const client::Registration& BatchStream::registration() const { return stream_->registration(); }
int64_t BatchStream::batches_per_epoch() const { return stream_->batches_per_epoch(); }
int64_t BatchStream::reconnects() const { return stream_->reconnects(); }

int64_t BatchStream::batches_in_epoch() const { return stream_->batches_in_epoch(); }

absl::Status BatchStream::StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset,
                                     const client::MixResume& mix_resume) {
  return stream_->StartEpoch(epoch, start_batch, sample_offset, mix_resume);
}

absl::StatusOr<std::optional<TrainingBatch>> BatchStream::Next() {
  absl::StatusOr<std::optional<client::FeedBatch>> received = stream_->Next();
  if (!received.ok()) return received.status();
  if (!received->has_value()) return std::optional<TrainingBatch>();
  client::FeedBatch batch = **std::move(received);
  const int64_t epoch = batch.epoch();
  const int64_t index = batch.index();
  if (options_.on_substitute == OnSubstitute::kFail) {
    for (const SampleMeta& sample : batch.samples()) {
      if (!sample.substituted) continue;
      return absl::FailedPreconditionError(absl::StrFormat(
          "job '%s' rank %d epoch %d batch %d: sample '%s' (shard %d, sample %d in it) could "
          "not be decoded and the server sent a substitute (--on-substitute fail; the "
          "server's log and status name the reason)",
          options_.job.job_id, options_.job.rank, epoch, index, sample.key, sample.shard,
          sample.index_in_shard));
    }
  }
  // Tensor code reports failures (device out of memory, a broken CUDA context) as
  // c10::Error; they become a status here, as every other failure of Next() does.
  try {
    return std::optional<TrainingBatch>(ToTensors(std::move(batch)));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrFormat(
        "job '%s' rank %d epoch %d batch %d: converting to tensors on %s failed: %s",
        options_.job.job_id, options_.job.rank, epoch, index, options_.device.str(),
        e.what_without_backtrace()));
  }
}

namespace {

// A run of image bytes of one channel: where it is read and where it goes.
struct ChannelRun {
  const uint8_t* source;
  int64_t target;  // element offset in the [B,3,C,C] output
  int64_t length;
  int channel;
};

// Splits the received chunks at channel-plane boundaries (planes of `plane` bytes,
// channels cycling 0,1,2), so each run is normalized with one channel's table.
std::vector<ChannelRun> ChannelRuns(const client::FeedBatch& batch, int64_t plane) {
  std::vector<ChannelRun> runs;
  int64_t offset = 0;
  for (absl::Span<const uint8_t> chunk : batch.image_chunks()) {
    const uint8_t* p = chunk.data();
    int64_t left = static_cast<int64_t>(chunk.size());
    while (left > 0) {
      const int64_t in_plane = offset % plane;
      const int64_t length = std::min(left, plane - in_plane);
      runs.push_back(ChannelRun{p, offset, length, static_cast<int>((offset / plane) % 3)});
      p += length;
      offset += length;
      left -= length;
    }
  }
  return runs;
}

}  // namespace

torch::Tensor TrainingBatch::ImagesUint8() const {
  const std::vector<int64_t>& shape = received.shape();
  const std::vector<absl::Span<const uint8_t>>& chunks = received.image_chunks();
  if (chunks.size() == 1) {
    // Read-only use: the bytes belong to the received buffer `keep` holds.
    std::shared_ptr<const void> keep = received.image_owner();
    return torch::from_blob(
        const_cast<uint8_t*>(chunks[0].data()), shape, [keep](void*) mutable { keep.reset(); },
        torch::kUInt8);
  }
  torch::Tensor copy = torch::empty(shape, torch::kUInt8);
  received.CopyImagesTo(copy.data_ptr<uint8_t>());
  return copy;
}

void BatchStream::SetNormalization(const torch::Device& device) {
  if (mean_.defined() && mean_.device() == device) return;
  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  mean_ = torch::tensor(std::vector<float>(options_.mean.begin(), options_.mean.end()), opts)
              .view({1, 3, 1, 1})
              .to(device);
  std_ = torch::tensor(std::vector<float>(options_.std.begin(), options_.std.end()), opts)
             .view({1, 3, 1, 1})
             .to(device);
  if (normalize_table_.empty()) {
    // Every byte value of every channel through Normalize's float ops on the CPU:
    // what the device path computes for each pixel, looked up instead of recomputed.
    torch::Tensor values =
        torch::arange(256, torch::kUInt8).view({1, 1, 1, 256}).repeat({1, 3, 1, 1});
    torch::Tensor mean = mean_.to(torch::kCPU), std = std_.to(torch::kCPU);
    torch::Tensor table = values.to(torch::kFloat32).div_(255.0f).sub_(mean).div_(std).contiguous();
    normalize_table_.assign(table.data_ptr<float>(), table.data_ptr<float>() + 3 * 256);
  }
}

// Places the batch on the training device and normalizes it: on the CPU one pass over
// the received bytes through the table; for CUDA one copy into pinned memory, sent
// non_blocking and normalized on the device. Either way the pixels are read once from
// the received buffer: no parse copy before.
TrainingBatch BatchStream::ToTensors(client::FeedBatch received) {
  TrainingBatch out;
  out.epoch = received.epoch();
  out.index = received.index();
  const std::vector<int64_t>& shape = received.shape();
  const int64_t b = shape[0];

  torch::Tensor labels = torch::empty({b}, torch::kInt64);
  torch::Tensor valid = torch::empty({b}, torch::kBool);
  int64_t* labels_data = labels.data_ptr<int64_t>();
  bool* valid_data = valid.data_ptr<bool>();
  out.samples = received.samples();
  for (int64_t i = 0; i < b; ++i) {
    labels_data[i] = received.labels()[i];
    valid_data[i] = out.samples[i].valid;
    if (out.samples[i].substituted) {
      ++out.substituted;
      labels_data[i] = -1;  // OnSubstitute::kMask (kFail never gets here)
    }
  }

  const torch::Device device = options_.device;
  SetNormalization(device);
  if (device.is_cpu()) {
    out.images = torch::empty(shape, torch::kFloat32);
    float* target = out.images.data_ptr<float>();
    const std::vector<ChannelRun> runs = ChannelRuns(received, shape[2] * shape[3]);
    const float* table = normalize_table_.data();
    at::parallel_for(0, static_cast<int64_t>(runs.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const ChannelRun& run = runs[r];
        const float* t = table + 256 * run.channel;
        float* dst = target + run.target;
        for (int64_t k = 0; k < run.length; ++k) dst[k] = t[run.source[k]];
      }
    });
    out.labels = labels;
    out.valid = valid;
  } else {
    // Page-locked staging (CUDA) lets the host->device copy run asynchronously on the
    // current stream; the caching host allocator keeps it alive until it is done.
    const bool pin = device.is_cuda();
    torch::Tensor staged =
        torch::empty(shape, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pin));
    received.CopyImagesTo(staged.data_ptr<uint8_t>());
    torch::Tensor images = staged.to(device, /*non_blocking=*/pin);
    out.labels = (pin ? labels.pin_memory() : labels).to(device, /*non_blocking=*/pin);
    out.valid = (pin ? valid.pin_memory() : valid).to(device, /*non_blocking=*/pin);
    out.images = images.to(torch::kFloat32).div_(255.0f).sub_(mean_).div_(std_);
  }
  out.received = std::move(received);
  return out;
}

}  // namespace shardcast

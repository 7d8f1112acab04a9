// BatchStream: RankStream's batches as torch tensors (see batch_stream.h).
#include "client/batch_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream = client::RankStream::Connect(options);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<BatchStream>(new BatchStream(std::move(options), *std::move(stream)));
}

BatchStream::BatchStream(BatchStreamOptions options, std::unique_ptr<client::RankStream> stream)
    : options_(std::move(options)), stream_(std::move(stream)) {}
BatchStream::~BatchStream() = default;

const shardcast::v1::RegisterResponse& BatchStream::registration() const {
  return stream_->registration();
}
int64_t BatchStream::batches_per_epoch() const { return stream_->batches_per_epoch(); }
int64_t BatchStream::reconnects() const { return stream_->reconnects(); }

int64_t BatchStream::batches_in_epoch() const { return stream_->batches_in_epoch(); }

absl::Status BatchStream::StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset) {
  return stream_->StartEpoch(epoch, start_batch, sample_offset);
}

absl::StatusOr<std::optional<TrainingBatch>> BatchStream::Next() {
  absl::StatusOr<std::optional<client::ReceivedBatch>> received = stream_->Next();
  if (!received.ok()) return received.status();
  if (!received->has_value()) return std::optional<TrainingBatch>();
  client::ReceivedBatch msg = **std::move(received);
  const int64_t epoch = msg->epoch();
  const int64_t index = msg->index();
  // Tensor code reports failures (device out of memory, a broken CUDA context) as
  // c10::Error; they become a status here, as every other failure of Next() does.
  try {
    return std::optional<TrainingBatch>(ToTensors(std::move(msg)));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrFormat(
        "job '%s' rank %d epoch %d batch %d: converting to tensors on %s failed: %s",
        options_.job.job_id(), options_.job.rank(), epoch, index, options_.device.str(),
        e.what_without_backtrace()));
  }
}

// Wraps the message's image bytes as a uint8 tensor that keeps the message alive,
// then places and normalizes on the training device.
TrainingBatch BatchStream::ToTensors(client::ReceivedBatch msg) {
  TrainingBatch out;
  out.epoch = msg->epoch();
  out.index = msg->index();
  const int64_t b = msg->shape(0);
  std::vector<int64_t> shape(msg->shape().begin(), msg->shape().end());
  void* data = msg->mutable_images()->data();
  out.images_uint8 = torch::from_blob(
      data, shape, [msg](void*) mutable { msg.reset(); }, torch::kUInt8);

  torch::Tensor labels = torch::empty({b}, torch::kInt64);
  torch::Tensor valid = torch::empty({b}, torch::kBool);
  int64_t* labels_data = labels.data_ptr<int64_t>();
  bool* valid_data = valid.data_ptr<bool>();
  out.samples.reserve(b);
  for (int64_t i = 0; i < b; ++i) {
    const shardcast::v1::SampleInfo& info = msg->samples(i);
    labels_data[i] = msg->labels(i);
    valid_data[i] = info.valid();
    out.samples.push_back(SampleMeta{info.key(), info.shard(), info.index_in_shard(), info.valid(),
                                     info.substituted()});
  }

  const torch::Device device = options_.device;
  torch::Tensor images_on_device;
  if (device.is_cuda()) {
    // Page-locked staging lets the host->device copy run asynchronously on the
    // current stream; the caching host allocator keeps it alive until it is done.
    torch::Tensor pinned =
        torch::empty(shape, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    pinned.copy_(out.images_uint8);
    images_on_device = pinned.to(device, /*non_blocking=*/true);
    out.labels = labels.pin_memory().to(device, /*non_blocking=*/true);
    out.valid = valid.pin_memory().to(device, /*non_blocking=*/true);
  } else {
    images_on_device = out.images_uint8.to(device);
    out.labels = labels.to(device);
    out.valid = valid.to(device);
  }
  if (!mean_.defined() || mean_.device() != images_on_device.device()) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat32);
    mean_ = torch::tensor(std::vector<float>(options_.mean.begin(), options_.mean.end()), opts)
                .view({1, 3, 1, 1})
                .to(images_on_device.device());
    std_ = torch::tensor(std::vector<float>(options_.std.begin(), options_.std.end()), opts)
               .view({1, 3, 1, 1})
               .to(images_on_device.device());
  }
  out.images = images_on_device.to(torch::kFloat32).div_(255.0f).sub_(mean_).div_(std_);
  return out;
}

}  // namespace shardcast

// RawStreamReader: the generated stub's Register and StreamBatches (see the header).
#include "bench/raw_stream_reader.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/rpc/channel.h"
#include "client/rpc/wire_batch.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::bench {

class RawStreamReader::Impl {
 public:
  Impl(const RawStreamJob& job, std::shared_ptr<grpc::Channel> channel)
      : job_(job), stub_(v1::Shardcast::NewStub(channel)), wire_stub_(channel) {}

  absl::Status Register() {
    v1::RegisterRequest request;
    request.set_job_id(job_.job_id);
    request.set_rank(0);
    request.set_world_size(1);
    request.set_batch_size(job_.batch);
    request.set_split(v1::SPLIT_SAMPLE);
    request.mutable_transform()->set_mode(v1::TRANSFORM_MODE_CENTER);
    request.mutable_transform()->set_resize(job_.resize);
    request.mutable_transform()->set_crop(job_.crop);
    // UNAVAILABLE while the server is still indexing.
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      grpc::Status s = stub_->Register(&context, request, &registration_);
      if (s.ok()) return absl::OkStatus();
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= 600) {
        return absl::UnavailableError(absl::StrCat("register: ", s.error_message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  absl::StatusOr<int64_t> ReadEpochs(int epochs, RawRead mode, const RawBatchCallback& on_batch) {
    int64_t images = 0;
    for (int e = 0; e < epochs; ++e) {
      grpc::ClientContext context;
      v1::StreamBatchesRequest request;
      request.set_job_id(job_.job_id);
      request.set_epoch(e);
      request.set_job_fingerprint(registration_.job_fingerprint());
      grpc::Status s;
      if (mode == RawRead::kWire) {
        auto reader = wire_stub_.StreamBatches(&context, request);
        client::WireBatch batch;
        while (reader->Read(&batch)) images += batch.header().labels_size();
        s = reader->Finish();
      } else {
        auto reader = stub_->StreamBatches(&context, request);
        v1::Batch batch;
        while (reader->Read(&batch)) {
          images += batch.labels_size();
          if (on_batch) {
            const std::vector<int64_t> shape(batch.shape().begin(), batch.shape().end());
            on_batch(reinterpret_cast<uint8_t*>(batch.mutable_images()->data()), shape);
          }
        }
        s = reader->Finish();
      }
      if (!s.ok()) return absl::InternalError(absl::StrCat("stream: ", s.error_message()));
    }
    return images;
  }

 private:
  const RawStreamJob job_;
  const std::unique_ptr<v1::Shardcast::Stub> stub_;
  const client::WireBatchStub wire_stub_;
  v1::RegisterResponse registration_;
};

absl::StatusOr<std::unique_ptr<RawStreamReader>> RawStreamReader::Register(
    const RawStreamJob& job) {
  client::ChannelOptions options;
  options.target = job.server;
  options.credentials = job.credentials;
  options.bearer_token = job.bearer_token;
  auto impl = std::make_unique<Impl>(job, client::MakeChannel(options));
  if (absl::Status s = impl->Register(); !s.ok()) return s;
  return std::unique_ptr<RawStreamReader>(new RawStreamReader(std::move(impl)));
}

RawStreamReader::RawStreamReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RawStreamReader::~RawStreamReader() = default;

absl::StatusOr<int64_t> RawStreamReader::ReadEpochs(int epochs, RawRead mode,
                                                    const RawBatchCallback& on_batch) {
  return impl_->ReadEpochs(epochs, mode, on_batch);
}

}  // namespace shardcast::bench

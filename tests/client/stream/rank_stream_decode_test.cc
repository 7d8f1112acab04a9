// RankStream in encoded delivery against a server on loopback that sends what the
// server's encoded delivery sends (real JPEG/PNG bytes with the crops PlanEncodedSample
// makes): decode "cpu" hands out server delivery's pixels with no `encoded` left, a
// corrupt image as the substitute (told and counted); decode "none" hands the images
// over; a server that does not grant encoded delivery (one older than delivery modes)
// is refused at registration; decode "server" asks for server delivery.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/stream/rank_stream.h"
#include "common/image/image_transform.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/common/image_test_util.h"

namespace shardcast::client {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using testing_util::EncodeJpeg;
using testing_util::EncodePng;
using testing_util::PhotoLike;
namespace v1 = ::shardcast::v1;

constexpr int kCrop = 64;
constexpr int64_t kSampleBytes = 3 * kCrop * kCrop;

TransformSpec Spec() {
  TransformSpec spec;
  spec.mode = TransformMode::kRandom;
  spec.resize = 80;
  spec.crop = kCrop;
  spec.dct_scaling = true;
  return spec;
}

// The images of the one batch of the epoch, and the seeds their crops were drawn with.
struct Samples {
  std::vector<std::string> images = {
      EncodeJpeg(PhotoLike(320, 240, 1), 320, 240, TJSAMP_420),
      EncodePng(PhotoLike(200, 260, 2), 200, 260, PNG_COLOR_TYPE_RGB, 8),
      EncodeJpeg(PhotoLike(300, 200, 3), 300, 200, TJSAMP_444).substr(0, 700),  // truncated
  };
  std::vector<uint64_t> seeds = {11, 12, 13};
};

// Register and StreamBatches as a server in encoded delivery answers them (or, with
// `grant` false, as one older than delivery modes: delivery unset).
class EncodedServer final : public v1::Shardcast::Service {
 public:
  explicit EncodedServer(bool grant) : grant_(grant) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      asked_ = request->delivery();
    }
    response->set_job_fingerprint("fp");
    response->set_world_size(1);
    response->set_batch_size(static_cast<int32_t>(samples_.images.size()));
    response->set_batches_per_epoch(1);
    response->set_num_samples(static_cast<int64_t>(samples_.images.size()));
    response->set_split(v1::SPLIT_SAMPLE);
    response->set_remainder(v1::REMAINDER_PAD);
    response->set_image(true);
    for (int64_t d : {3, kCrop, kCrop}) response->add_image_shape(d);
    response->mutable_transform()->set_mode(v1::TRANSFORM_MODE_RANDOM);
    response->mutable_transform()->set_crop(kCrop);
    response->mutable_transform()->set_resize(80);
    response->mutable_transform()->set_dct_scaling(true);
    if (grant_) response->set_delivery(request->delivery());
    return grpc::Status::OK;
  }

  grpc::Status StreamBatches(grpc::ServerContext*, const v1::StreamBatchesRequest* request,
                             grpc::ServerWriter<v1::Batch>* writer) override {
    v1::Batch batch;
    batch.set_epoch(request->epoch());
    for (int64_t d : {static_cast<int64_t>(samples_.images.size()), int64_t{3}, int64_t{kCrop},
                      int64_t{kCrop}}) {
      batch.add_shape(d);
    }
    for (size_t i = 0; i < samples_.images.size(); ++i) {
      const std::string& image = samples_.images[i];
      // The crop is planned on the header, which the truncated JPEG still has.
      absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(image, Spec(), samples_.seeds[i]);
      if (!plan.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "plan");
      v1::SampleInfo* info = batch.add_samples();
      info->set_key("key" + std::to_string(i));
      info->set_shard(4);
      info->set_valid(true);
      batch.add_labels(static_cast<int64_t>(i));
      v1::EncodedImage* e = info->mutable_encoded();
      e->set_data(image);
      e->set_source_width(plan->crop.source_width);
      e->set_source_height(plan->crop.source_height);
      e->set_left(plan->crop.left);
      e->set_top(plan->crop.top);
      e->set_width(plan->crop.width);
      e->set_height(plan->crop.height);
      e->set_flip(plan->crop.flip);
      e->set_output_size(plan->crop.output);
    }
    writer->Write(batch);
    return grpc::Status::OK;
  }

  v1::ImageDelivery asked() const {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

 private:
  const bool grant_;
  const Samples samples_;
  mutable absl::Mutex mu_;
  v1::ImageDelivery asked_ = v1::IMAGE_DELIVERY_UNSPECIFIED;
};

class RankStreamDecodeTest : public ::testing::Test {
 protected:
  void Serve(bool grant) {
    service_ = std::make_unique<EncodedServer>(grant);
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  RankStreamOptions Options(ClientDecode decode) const {
    RankStreamOptions options;
    options.server = address_;
    options.decode = decode;
    options.decode_threads = 2;
    options.reconnect_deadline_seconds = 5;
    options.job.set_job_id("job");
    options.job.set_world_size(1);
    return options;
  }

  // The epoch's one batch.
  static ReceivedBatch OnlyBatch(RankStream& stream) {
    EXPECT_TRUE(stream.StartEpoch(0).ok());
    absl::StatusOr<std::optional<ReceivedBatch>> next = stream.Next();
    EXPECT_TRUE(next.ok()) << next.status();
    EXPECT_TRUE(next.ok() && next->has_value());
    return next.ok() && next->has_value() ? **next : nullptr;
  }

  std::unique_ptr<EncodedServer> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(RankStreamDecodeTest, DecodeCpuHandsOutServerDeliverysPixelsAndTheSubstitute) {
  Serve(/*grant=*/true);
  std::vector<std::string> told;
  RankStreamOptions options = Options(ClientDecode::kCpu);
  options.on_decode_failure = [&told](const std::string& notice) { told.push_back(notice); };
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(service_->asked(), v1::IMAGE_DELIVERY_ENCODED);
  ReceivedBatch batch = OnlyBatch(**stream);
  ASSERT_NE(batch, nullptr);
  const Samples samples;
  ASSERT_EQ(batch->image_bytes(), 3 * kSampleBytes);
  const std::string pixels = batch->ImagesToString();
  for (int i = 0; i < 2; ++i) {
    std::string server(kSampleBytes, '\0');
    ASSERT_TRUE(DecodeAndTransform(samples.images[i], Spec(), samples.seeds[i],
                                   reinterpret_cast<uint8_t*>(server.data()))
                    .ok());
    EXPECT_EQ(pixels.substr(i * kSampleBytes, kSampleBytes), server) << "sample " << i;
    EXPECT_FALSE(batch->header().samples(i).substituted());
  }
  EXPECT_THAT(pixels.substr(2 * kSampleBytes), Each('\x80'));
  EXPECT_TRUE(batch->header().samples(2).substituted());
  for (const v1::SampleInfo& sample : batch->header().samples()) {
    EXPECT_FALSE(sample.has_encoded());  // decoded: as server delivery sends it
  }
  EXPECT_EQ((*stream)->client_substituted(), 1);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_THAT(told[0], HasSubstr("job 'job' rank 0 epoch 0 batch 0 sample 2, shard 4 key 'key2'"));
}

TEST_F(RankStreamDecodeTest, DecodeNoneHandsTheImagesOverUndecoded) {
  Serve(/*grant=*/true);
  absl::StatusOr<std::unique_ptr<RankStream>> stream =
      RankStream::Connect(Options(ClientDecode::kNone));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ReceivedBatch batch = OnlyBatch(**stream);
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->image_bytes(), 0);
  const Samples samples;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(batch->header().samples(i).encoded().data(), samples.images[i]);
  }
  EXPECT_EQ((*stream)->client_substituted(), 0);
}

TEST_F(RankStreamDecodeTest, AServerThatDoesNotGrantEncodedDeliveryIsRefused) {
  Serve(/*grant=*/false);
  absl::StatusOr<std::unique_ptr<RankStream>> stream =
      RankStream::Connect(Options(ClientDecode::kCpu));
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stream.status().message(),
              HasSubstr("delivery IMAGE_DELIVERY_UNSPECIFIED for the delivery "
                        "IMAGE_DELIVERY_ENCODED asked"));
}

TEST_F(RankStreamDecodeTest, DecodeServerAsksForServerDelivery) {
  Serve(/*grant=*/false);  // an older server: pixels, as asked
  absl::StatusOr<std::unique_ptr<RankStream>> stream =
      RankStream::Connect(Options(ClientDecode::kServer));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(service_->asked(), v1::IMAGE_DELIVERY_SERVER);
}

}  // namespace
}  // namespace shardcast::client

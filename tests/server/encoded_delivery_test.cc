// Encoded delivery (issue 39) through a real server on loopback: a job registered with
// IMAGE_DELIVERY_ENCODED gets each image member exactly as the tar stores it, with the
// crop the server's transform would make, and decoding those bytes with that crop
// (DecodeWithCrop, the client's decode) gives the pixels of the same job in server
// delivery byte for byte: JPEG of every subsampling and a progressive one, PNG, lossy
// and lossless WebP; center and random crops; with and without --dct-scaling; over 2
// ranks, 2 epochs, a resume and an elastic resume. Substitutes, refusals and batch
// memory follow.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/image/image_transform.h"
#include "proto/encoded_image_proto.h"
#include "tests/common/image_test_util.h"
#include "tests/server/server_test_support.h"
#include "tests/support/object_servers.h"
#include "tests/support/solid_png.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::server_testing {
namespace {

using Written = std::map<std::string, std::string>;  // key -> the image member's bytes

// Image i of the mixed dataset: a photo-like picture of a size of its own, in one of
// eight encodings.
std::pair<std::string, std::string> MixedImage(int i) {
  const int w = 60 + (i * 13) % 50, h = 50 + (i * 7) % 45;
  const std::vector<uint8_t> px = testing_util::PhotoLike(w, h, static_cast<uint32_t>(i));
  switch (i % 8) {
    case 0:
      return {"jpg", testing_util::EncodeJpeg(px, w, h, TJSAMP_420)};
    case 1:
      return {"jpg", testing_util::EncodeJpeg(px, w, h, TJSAMP_422)};
    case 2:
      return {"jpg", testing_util::EncodeJpeg(px, w, h, TJSAMP_444)};
    case 3:
      return {"jpg", testing_util::EncodeJpeg(px, w, h, TJSAMP_GRAY)};
    case 4:
      return {"jpg", testing_util::EncodeJpeg(px, w, h, TJSAMP_420, 90, TJFLAG_PROGRESSIVE)};
    case 5:
      return {"png", testing_util::EncodePng(px, w, h, PNG_COLOR_TYPE_RGB, 8)};
    case 6:
      return {"webp", testing_util::EncodeWebp(px, w, h, 3, /*lossless=*/false)};
    default:
      return {"webp", testing_util::EncodeWebp(px, w, h, 3, /*lossless=*/true)};
  }
}

// `samples` samples of `per_shard` a shard: `image(i)` gives sample i's extension and
// bytes; label i % 5.
Written WriteDataset(const std::string& dir, int samples, int per_shard,
                     const std::function<std::pair<std::string, std::string>(int)>& image) {
  Written written;
  for (int first = 0, shard = 0; first < samples; first += per_shard, ++shard) {
    absl::StatusOr<std::unique_ptr<pack::TarWriter>> tar =
        pack::TarWriter::Open(absl::StrFormat("%s/shard-%06d.tar", dir, shard));
    EXPECT_TRUE(tar.ok()) << tar.status();
    if (!tar.ok()) return written;
    for (int i = first; i < std::min(samples, first + per_shard); ++i) {
      const std::string key = absl::StrFormat("s%04d", i);
      const auto [ext, bytes] = image(i);
      EXPECT_TRUE((*tar)->AddMember(absl::StrCat(key, ".", ext), bytes).ok());
      EXPECT_TRUE((*tar)->AddMember(absl::StrCat(key, ".cls"), absl::StrCat(i % 5)).ok());
      written[key] = bytes;
    }
    EXPECT_TRUE((*tar)->Close().ok());
  }
  return written;
}

v1::RegisterRequest Job(const std::string& job, int rank, v1::ImageDelivery delivery,
                        v1::TransformMode mode, int batch = 4) {
  v1::RegisterRequest request = MakeRegister(job, rank, 2, batch, v1::SPLIT_SAMPLE, 20, 16);
  request.set_remainder(v1::REMAINDER_PAD);
  request.mutable_transform()->set_mode(mode);
  request.set_delivery(delivery);
  return request;
}

// What comparing an encoded batch with its server-delivery twin found.
struct Compared {
  int decoded = 0;             // samples whose decode equals the server's pixels
  int server_substituted = 0;  // flagged by the server in both deliveries
  int client_substituted = 0;  // sent as stored, the decode fails: the server's gray
  int cut = 0;                 // sent as a lossless cut (--lossless-cut)
};

// Checks `encoded` against `server` (the same batch of the same job in server
// delivery): same samples, labels, keys and flags; each image the tar's bytes, whose
// decode with its crop is the server's pixels.
void CompareBatches(const v1::Batch& server, const v1::Batch& encoded, const Written& written,
                    TransformMode mode, bool dct_scaling, Compared* compared) {
  ASSERT_EQ(encoded.epoch(), server.epoch());
  ASSERT_EQ(encoded.index(), server.index());
  EXPECT_EQ(std::vector<int64_t>(encoded.shape().begin(), encoded.shape().end()),
            std::vector<int64_t>(server.shape().begin(), server.shape().end()));
  EXPECT_TRUE(encoded.images().empty());
  EXPECT_EQ(std::vector<int64_t>(encoded.labels().begin(), encoded.labels().end()),
            std::vector<int64_t>(server.labels().begin(), server.labels().end()));
  ASSERT_EQ(encoded.samples_size(), server.samples_size());
  ASSERT_EQ(server.shape_size(), 4);
  const size_t sample_bytes = 3 * static_cast<size_t>(server.shape(2) * server.shape(3));
  for (int i = 0; i < server.samples_size(); ++i) {
    const v1::SampleInfo& want = server.samples(i);
    const v1::SampleInfo& got = encoded.samples(i);
    EXPECT_EQ(got.key(), want.key());
    EXPECT_EQ(got.shard(), want.shard());
    EXPECT_EQ(got.index_in_shard(), want.index_in_shard());
    EXPECT_EQ(got.valid(), want.valid());
    if (!want.valid()) {
      EXPECT_FALSE(got.has_encoded()) << "padding carries no image";
      continue;
    }
    ASSERT_TRUE(got.has_encoded()) << got.key();
    const v1::EncodedImage& image = got.encoded();
    const std::string pixels = server.images().substr(i * sample_bytes, sample_bytes);
    if (got.substituted()) {
      EXPECT_TRUE(want.substituted()) << got.key();
      EXPECT_TRUE(image.data().empty()) << got.key();
      ++compared->server_substituted;
      continue;
    }
    const SampleCrop crop = CropFromWire(image, mode);
    const std::optional<SourceWindow> window = CutFromWire(image);
    if (window.has_value()) {
      EXPECT_LT(image.data().size(), written.at(got.key()).size()) << got.key();
      ++compared->cut;
    } else {
      EXPECT_TRUE(image.data() == written.at(got.key())) << got.key() << " is not sent as stored";
    }
    std::string decoded(sample_bytes, '\0');
    const absl::Status status =
        DecodeWithCrop(image.data(), crop, dct_scaling, reinterpret_cast<uint8_t*>(decoded.data()),
                       nullptr, window.has_value() ? &*window : nullptr);
    if (!status.ok()) {  // the client substitutes, as the server did
      EXPECT_TRUE(want.substituted()) << got.key() << ": " << status;
      EXPECT_EQ(pixels, std::string(sample_bytes, static_cast<char>(128)));
      ++compared->client_substituted;
      continue;
    }
    EXPECT_FALSE(want.substituted()) << got.key();
    EXPECT_TRUE(decoded == pixels) << got.key() << " decodes to other pixels than the server's";
    ++compared->decoded;
  }
}

// Every batch of both ranks of `job` over epochs 0 and 1, rank by rank.
std::vector<v1::Batch> TwoEpochs(InProcessServer& server, const std::string& job) {
  std::vector<v1::Batch> batches;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int rank = 0; rank < 2; ++rank) {
      StreamResult result = StreamAll(server.stub(), job, rank, epoch, 0);
      EXPECT_TRUE(result.status.ok()) << result.status.error_message();
      for (v1::Batch& batch : result.batches) batches.push_back(std::move(batch));
    }
  }
  return batches;
}

// Registers both ranks of `job` (server delivery) and `job`-encoded, streams both,
// and compares them batch by batch.
Compared ServeBothWays(InProcessServer& server, const Written& written, const std::string& job,
                       v1::TransformMode mode, bool dct_scaling) {
  v1::RegisterResponse server_job, encoded_job;
  const std::string encoded_id = absl::StrCat(job, "-encoded");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(
        Register(server.stub(), Job(job, rank, v1::IMAGE_DELIVERY_SERVER, mode), &server_job).ok());
    EXPECT_TRUE(Register(server.stub(), Job(encoded_id, rank, v1::IMAGE_DELIVERY_ENCODED, mode),
                         &encoded_job)
                    .ok());
  }
  EXPECT_EQ(server_job.delivery(), v1::IMAGE_DELIVERY_SERVER);
  EXPECT_EQ(encoded_job.delivery(), v1::IMAGE_DELIVERY_ENCODED);
  EXPECT_EQ(encoded_job.transform().dct_scaling(), dct_scaling);
  EXPECT_NE(encoded_job.job_fingerprint(), server_job.job_fingerprint());
  EXPECT_EQ(encoded_job.batches_per_epoch(), server_job.batches_per_epoch());

  const std::vector<v1::Batch> want = TwoEpochs(server, job);
  const std::vector<v1::Batch> got = TwoEpochs(server, encoded_id);
  Compared compared;
  EXPECT_EQ(got.size(), want.size());
  const TransformMode transform =
      mode == v1::TRANSFORM_MODE_RANDOM ? TransformMode::kRandom : TransformMode::kCenter;
  for (size_t b = 0; b < std::min(got.size(), want.size()); ++b) {
    CompareBatches(want[b], got[b], written, transform, dct_scaling, &compared);
  }

  // A stream resumed from batch 2 sends what the whole stream sent from there.
  StreamResult whole = StreamAll(server.stub(), encoded_id, 1, 1, 0);
  StreamResult resumed = StreamAll(server.stub(), encoded_id, 1, 1, 2);
  EXPECT_TRUE(whole.status.ok() && resumed.status.ok());
  EXPECT_EQ(resumed.batches.size() + 2, whole.batches.size());
  for (size_t b = 0; b < resumed.batches.size() && b + 2 < whole.batches.size(); ++b) {
    EXPECT_EQ(resumed.batches[b].SerializeAsString(), whole.batches[b + 2].SerializeAsString());
  }
  return compared;
}

class EncodedDeliveryTest
    : public ::testing::TestWithParam<std::tuple<v1::TransformMode, bool /*dct_scaling*/>> {};

TEST_P(EncodedDeliveryTest, ImagesAsStoredDecodeToTheServerDeliveryPixels) {
  const auto [mode, dct_scaling] = GetParam();
  TempDir dir;
  const Written written = WriteDataset(dir.path(), 45, 20, MixedImage);
  server::ServerOptions options;
  options.defaults.transform.dct_scaling = dct_scaling;
  InProcessServer server(dir.path(), options);
  const Compared compared = ServeBothWays(server, written, "mixed", mode, dct_scaling);
  EXPECT_EQ(compared.decoded, 2 * 45);  // every sample once an epoch, each decoded
  EXPECT_EQ(compared.server_substituted + compared.client_substituted, 0);
  EXPECT_EQ(compared.cut, 0) << "no cut without --lossless-cut";

  const v1::GetStatusResponse status = GetStatus(server.stub());
  std::map<std::string, v1::ImageDelivery> deliveries;
  for (const v1::JobStatus& job : status.jobs()) deliveries[job.job_id()] = job.delivery();
  EXPECT_EQ(deliveries["mixed"], v1::IMAGE_DELIVERY_SERVER);
  EXPECT_EQ(deliveries["mixed-encoded"], v1::IMAGE_DELIVERY_ENCODED);
}

INSTANTIATE_TEST_SUITE_P(CenterAndRandom, EncodedDeliveryTest,
                         ::testing::Combine(::testing::Values(v1::TRANSFORM_MODE_CENTER,
                                                              v1::TRANSFORM_MODE_RANDOM),
                                            ::testing::Bool()));

// --lossless-cut: a random crop's JPEG is sent cut to what the crop reads, and the cut
// decodes to the server delivery's pixels (PNG and WebP are sent whole).
class LosslessCutDeliveryTest : public ::testing::TestWithParam<bool /*dct_scaling*/> {};

TEST_P(LosslessCutDeliveryTest, CutJpegsDecodeToTheServerDeliveryPixels) {
  const bool dct_scaling = GetParam();
  TempDir dir;
  const Written written = WriteDataset(dir.path(), 45, 20, MixedImage);
  server::ServerOptions options;
  options.defaults.transform.dct_scaling = dct_scaling;
  options.lossless_cut = true;
  InProcessServer server(dir.path(), options);
  const Compared compared =
      ServeBothWays(server, written, "cut", v1::TRANSFORM_MODE_RANDOM, dct_scaling);
  EXPECT_EQ(compared.decoded, 2 * 45);
  EXPECT_GT(compared.cut, 2 * 45 / 3) << "most JPEG crops leave something to cut";
  EXPECT_LT(compared.cut, 2 * 45);
}

INSTANTIATE_TEST_SUITE_P(DctScaling, LosslessCutDeliveryTest, ::testing::Bool());

// An elastic resume: 2 batches of both ranks of epoch 1 on 2 ranks (16 positions),
// the rest on one rank with batch 5 (same fingerprint): every sample exactly once, each
// as stored.
TEST(EncodedDeliveryResumeTest, AnElasticResumeServesEverySampleOnceAsStored) {
  TempDir dir;
  const Written written = WriteDataset(dir.path(), 45, 20, MixedImage);
  InProcessServer server(dir.path());
  v1::RegisterResponse w2, w1;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(Register(server.stub(),
                         Job("w2", rank, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_RANDOM),
                         &w2)
                    .ok());
  }
  v1::RegisterRequest one =
      Job("w1", 0, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_RANDOM, /*batch=*/5);
  one.set_world_size(1);
  ASSERT_TRUE(Register(server.stub(), one, &w1).ok());
  EXPECT_EQ(w1.job_fingerprint(), w2.job_fingerprint());
  std::multiset<std::string> served;
  const auto take = [&](const v1::Batch& batch) {
    for (const v1::SampleInfo& info : batch.samples()) {
      if (!info.valid()) continue;
      served.insert(info.key());
      EXPECT_TRUE(info.encoded().data() == written.at(info.key())) << info.key();
    }
  };
  for (int rank = 0; rank < 2; ++rank) {
    const StreamResult first = StreamAll(server.stub(), "w2", rank, 1, 0);
    ASSERT_TRUE(first.status.ok()) << first.status.error_message();
    ASSERT_GE(first.batches.size(), 2u);
    take(first.batches[0]);
    take(first.batches[1]);
  }
  v1::StreamBatchesRequest rest;
  rest.set_job_id("w1");
  rest.set_epoch(1);
  rest.set_sample_offset(16);
  rest.set_job_fingerprint(w1.job_fingerprint());
  const StreamResult tail = StreamAll(server.stub(), rest);
  ASSERT_TRUE(tail.status.ok()) << tail.status.error_message();
  for (const v1::Batch& batch : tail.batches) take(batch);
  EXPECT_EQ(served.size(), written.size());
  for (const auto& [key, bytes] : written) EXPECT_EQ(served.count(key), 1u) << key;
}

// Every batch of epochs 0 and 1 of both ranks of an encoded job, serialized.
std::vector<std::string> TwoEncodedEpochs(InProcessServer& server) {
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse response;
    const grpc::Status status = Register(
        server.stub(), Job("job", rank, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_RANDOM),
        &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  std::vector<std::string> batches;
  for (const v1::Batch& batch : TwoEpochs(server, "job")) {
    batches.push_back(batch.SerializeAsString());
  }
  return batches;
}

TEST(EncodedDeliveryRemoteTest, ImagesFromHttpEqualTheLocalOnes) {
  TempDir dir;
  WriteDataset(dir.path(), 45, 20, MixedImage);  // shard-000000..000002
  std::vector<std::string> want;
  {
    InProcessServer local(dir.path());
    want = TwoEncodedEpochs(local);
  }
  ASSERT_EQ(want.size(), 2u * 2u * 6u);  // 23 positions a rank, batch 4, padded
  auto nginx = testing_util::NginxServer::Start(dir.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  server::ServerOptions options;
  options.remote.fetch.first_backoff = absl::Milliseconds(20);
  options.remote.fetch.request_deadline = absl::Seconds(30);
  InProcessServer http(absl::StrCat((*nginx)->url(), "/shard-{000000..000002}.tar"), options);
  EXPECT_EQ(TwoEncodedEpochs(http), want);
}

// Samples 0-3 of each eight fail in four ways: a header that does not read, a member
// over --max-member-bytes, decode buffers over --max-decode-memory (a 3000 x 3000
// PNG: 27 MB), and a JPEG whose header reads over broken data. The server substitutes
// the first three in both deliveries; the fourth it sends as stored, and its decode
// fails on the client into the same gray.
TEST(EncodedDeliverySubstitutionTest,
     TheServerSubstitutesWhatServerDeliverySubstitutesBeforeDecoding) {
  TempDir dir;
  const std::string noisy = [] {
    const std::vector<uint8_t> px = testing_util::PhotoLike(200, 200, 7);
    return testing_util::EncodePng(px, 200, 200, PNG_COLOR_TYPE_RGB, 8);  // > 64 KB
  }();
  ASSERT_GT(noisy.size(), 64u << 10);
  const Written written = WriteDataset(dir.path(), 32, 16, [&](int i) {
    switch (i % 8) {
      case 0:
        return std::make_pair(std::string("jpg"), std::string(300, 'x'));
      case 1:
        return std::make_pair(std::string("png"), noisy);
      case 2:
        return std::make_pair(std::string("png"), testing_util::SolidPng(3000, 3000, 9, 8, 7));
      case 3: {
        std::string jpeg = MixedImage(i - 3).second;  // a 4:2:0 JPEG
        // Its headers intact, its data cut a few bytes after the scan's start.
        jpeg.resize(jpeg.find("\xff\xda") + 20);
        return std::make_pair(std::string("jpg"), jpeg);
      }
      default:
        return MixedImage(i);
    }
  });
  server::ServerOptions options;
  options.max_member_bytes = 64 << 10;
  options.max_decode_memory_bytes = 24 << 20;  // a lossless WebP here needs 21 MB
  InProcessServer server(dir.path(), options);
  const Compared compared =
      ServeBothWays(server, written, "faults", v1::TRANSFORM_MODE_RANDOM, false);
  // Per epoch 32 samples, 4 of each reason.
  EXPECT_EQ(compared.server_substituted, 2 * 12);
  EXPECT_EQ(compared.client_substituted, 2 * 4);
  EXPECT_EQ(compared.decoded, 2 * 16);
  const v1::GetStatusResponse status = GetStatus(server.stub());
  // 4 an epoch in each delivery (and more in the resumed streams).
  EXPECT_GE(status.images_over_member_limit(), 2 * 4 + 2 * 4);
  EXPECT_GE(status.images_over_decode_memory(), 2 * 4 + 2 * 4);
  EXPECT_GE(status.decode_errors(), 2 * 16 + 2 * 12);
}

TEST(EncodedDeliveryRefusalTest, EncodedWithoutAnImageIsRefusedNamingTheField) {
  TempDir dir;
  WriteDataset(dir.path(), 8, 8, MixedImage);
  InProcessServer server(dir.path());
  v1::RegisterRequest request =
      Job("text", 0, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_CENTER);
  request.set_image(false);
  request.add_fields("cls");
  v1::RegisterResponse response;
  const grpc::Status refused = Register(server.stub(), request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("delivery"), std::string::npos) << refused.error_message();
  // Left unset, a members-only job is served, whatever the server's default delivery.
  request.clear_delivery();
  EXPECT_TRUE(Register(server.stub(), request, &response).ok());
  EXPECT_EQ(response.delivery(), v1::IMAGE_DELIVERY_SERVER);
}

// Noisy PNGs of about 120 KB: 4 of them are 16 x 16 x 3 pixels decoded, far more sent.
std::pair<std::string, std::string> BigPng(int i) {
  const std::vector<uint8_t> px = testing_util::PhotoLike(200, 200, static_cast<uint32_t>(i));
  return {"png", testing_util::EncodePng(px, 200, 200, PNG_COLOR_TYPE_RGB, 8)};
}

TEST(EncodedDeliveryRefusalTest, AJobWhoseLargestImagesOverflowAMessageIsRefusedWithTheNumbers) {
  TempDir dir;
  const Written written = WriteDataset(dir.path(), 8, 8, BigPng);
  uint64_t largest = 0;
  for (const auto& [key, bytes] : written) largest = std::max<uint64_t>(largest, bytes.size());
  server::ServerOptions options;
  options.max_message_bytes = 300 << 10;
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  const grpc::Status refused =
      Register(server.stub(),
               Job("big", 0, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_CENTER, 4), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find(
                absl::StrCat("a batch of 4 samples whose members take ", largest, " bytes each")),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("max message size 307200"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(Register(server.stub(),
                       Job("pixels", 0, v1::IMAGE_DELIVERY_SERVER, v1::TRANSFORM_MODE_CENTER, 4),
                       &response)
                  .ok());
  EXPECT_TRUE(Register(server.stub(),
                       Job("two", 0, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_CENTER, 2),
                       &response)
                  .ok());
}

TEST(EncodedDeliveryRefusalTest, CompressedBytesCountTowardTheBatchMemory) {
  TempDir dir;
  WriteDataset(dir.path(), 8, 8, BigPng);
  server::ServerOptions options;
  options.max_batch_memory_bytes = 128 << 10;  // 4 x 768 pixel bytes fit, 4 PNGs do not
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(Register(server.stub(),
                         Job("pixels", rank, v1::IMAGE_DELIVERY_SERVER, v1::TRANSFORM_MODE_CENTER),
                         &response)
                    .ok());
    ASSERT_TRUE(
        Register(server.stub(),
                 Job("encoded", rank, v1::IMAGE_DELIVERY_ENCODED, v1::TRANSFORM_MODE_CENTER),
                 &response)
            .ok());
  }
  EXPECT_TRUE(StreamAll(server.stub(), "pixels", 0, 0, 0).status.ok());
  const StreamResult refused = StreamAll(server.stub(), "encoded", 0, 0, 0);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status.error_message().find("batch memory"), std::string::npos)
      << refused.status.error_message();
}

}  // namespace
}  // namespace shardcast::server_testing

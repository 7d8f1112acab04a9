// Members beside the image (issue 37) through a real server on loopback: shards written
// as tars with a JPEG, a label, a caption (.txt with CJK and emoji) and metadata
// (.json); jobs that ask for fields get every member's bytes as stored, every selected
// sample exactly once an epoch, and the samples without a required field left out and
// counted. Checked against what the test wrote, not against the server's own index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/server/server_test_support.h"
#include "tests/support/object_servers.h"
#include "tools/pack/image_encode.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::server_testing {
namespace {

// What the test wrote: each sample's members by extension, and its label.
struct Written {
  std::map<std::string, std::map<std::string, std::string>> members;  // key -> ext -> bytes
  std::map<std::string, int64_t> labels;
};

std::string SmallJpeg(int seed) {
  std::vector<uint8_t> rgb(24 * 24 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7 + seed * 31) & 0xff);
  absl::StatusOr<std::string> jpeg = pack::EncodeJpeg(rgb.data(), 24, 24);
  EXPECT_TRUE(jpeg.ok()) << jpeg.status();
  return jpeg.ok() ? *jpeg : std::string();
}

// `samples` samples in shards of `per_shard`: sample i has a JPEG, a .cls label, a
// caption unless `has_txt(i)` says no, and a .json unless i % 7 == 3. `caption_bytes`
// (when > 0) pads sample 0's caption to that size.
Written WriteCaptioned(const std::string& dir, int samples, int per_shard,
                       const std::function<bool(int)>& has_txt, size_t caption_bytes = 0) {
  pack::ShardWriterOptions options;
  options.out_dir = dir;
  options.per_shard = per_shard;
  pack::ShardWriter writer(options);
  Written written;
  for (int i = 0; i < samples; ++i) {
    const std::string key = absl::StrFormat("s%04d", i);
    std::vector<pack::SampleField> fields;
    fields.emplace_back("jpg", SmallJpeg(i));
    fields.emplace_back("cls", absl::StrCat(i % 5));
    if (has_txt(i)) {
      // CJK and an emoji in UTF-8, and a byte that is not UTF-8: sent as stored.
      std::string caption = absl::StrCat("a photo ", i, " \xe7\x8c\xab \xf0\x9f\x90\x88 \xff");
      if (i == 0 && caption_bytes > caption.size()) caption.resize(caption_bytes, 'x');
      fields.emplace_back("txt", caption);
    }
    if (i % 7 != 3) fields.emplace_back("json", absl::StrCat("{\"width\": ", 24 + i, "}"));
    for (const auto& [ext, bytes] : fields) written.members[key][ext] = bytes;
    written.labels[key] = i % 5;
    absl::Status added = writer.AddSample(key, fields);
    EXPECT_TRUE(added.ok()) << added;
  }
  absl::Status closed = writer.Close();
  EXPECT_TRUE(closed.ok()) << closed;
  return written;
}

bool Always(int) { return true; }

v1::RegisterRequest FieldsJob(const std::string& job, int rank, int world, int batch,
                              const std::vector<std::string>& fields, bool image = true) {
  v1::RegisterRequest request = MakeRegister(job, rank, world, batch);
  request.set_remainder(v1::REMAINDER_PAD);
  for (const std::string& field : fields) request.add_fields(field);
  if (!image) request.set_image(false);
  return request;
}

// Checks every valid sample of `batch` against what was written for fields
// {"txt", "json?"}, and returns the keys it served.
std::vector<std::string> CheckTxtJson(const v1::Batch& batch, const Written& written) {
  std::vector<std::string> keys;
  for (int i = 0; i < batch.samples_size(); ++i) {
    const v1::SampleInfo& info = batch.samples(i);
    if (!info.valid()) {
      EXPECT_EQ(info.fields_size(), 0) << "padding carries no fields";
      continue;
    }
    keys.push_back(info.key());
    const auto& members = written.members.at(info.key());
    EXPECT_EQ(batch.labels(i), written.labels.at(info.key()));
    EXPECT_FALSE(info.substituted());
    EXPECT_EQ(info.fields_size(), 2);
    if (info.fields_size() != 2) continue;
    EXPECT_TRUE(info.fields(0).present());
    EXPECT_EQ(info.fields(0).ext(), "txt");
    EXPECT_TRUE(info.fields(0).data() == members.at("txt")) << info.key();
    const auto json = members.find("json");
    EXPECT_EQ(info.fields(1).present(), json != members.end()) << info.key();
    EXPECT_EQ(info.fields(1).data(), json != members.end() ? json->second : "") << info.key();
    EXPECT_EQ(info.fields(1).ext(), json != members.end() ? "json" : "");
  }
  return keys;
}

TEST(FieldsServingTest, MembersBesideTheImageEqualTheTarBytesExactlyOncePerEpoch) {
  TempDir dir;
  const Written written = WriteCaptioned(dir.path(), 45, 20, Always);
  InProcessServer server(dir.path());
  Reference reference(dir.path());
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse response;
    ASSERT_TRUE(
        Register(server.stub(), FieldsJob("fields", rank, 2, 4, {"txt", "json?"}), &response).ok());
    EXPECT_EQ(response.num_samples(), 45);
    EXPECT_TRUE(response.left_out().empty());
    EXPECT_EQ(response.image_shape_size(), 3);
    EXPECT_EQ(std::vector<std::string>(response.fields().begin(), response.fields().end()),
              (std::vector<std::string>{"txt", "json?"}));
  }
  v1::RegisterResponse plain;  // the same job without fields: same plan, same pixels
  ASSERT_TRUE(Register(server.stub(), FieldsJob("plain", 0, 2, 4, {}), &plain).ok());
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::string> served;
    for (int rank = 0; rank < 2; ++rank) {
      StreamResult result = StreamAll(server.stub(), "fields", rank, epoch, 0);
      ASSERT_TRUE(result.status.ok()) << result.status.error_message();
      const std::vector<PlannedBatch> planned = reference.Plan(plain, 2, rank, epoch);
      ASSERT_EQ(result.batches.size(), planned.size());
      for (size_t b = 0; b < planned.size(); ++b) {
        reference.ExpectBatch(result.batches[b], planned[b], Reference::Spec(plain));
        for (const std::string& key : CheckTxtJson(result.batches[b], written)) served.insert(key);
      }
    }
    ASSERT_EQ(served.size(), written.members.size()) << "epoch " << epoch;
    for (const auto& [key, members] : written.members) {
      EXPECT_EQ(served.count(key), 1u) << key << " in epoch " << epoch;
    }
  }
}

TEST(FieldsServingTest, SamplesWithoutARequiredFieldAreLeftOutAndCounted) {
  TempDir dir;
  const auto has_txt = [](int i) { return i % 4 != 1; };  // 10 of 40 lack a caption
  const Written written = WriteCaptioned(dir.path(), 40, 15, has_txt);
  InProcessServer server(dir.path());
  v1::RegisterResponse response;
  ASSERT_TRUE(
      Register(server.stub(), FieldsJob("captions", 0, 1, 3, {"txt", "json?"}), &response).ok());
  EXPECT_EQ(response.num_samples(), 30);
  ASSERT_EQ(response.left_out_size(), 1);
  EXPECT_EQ(response.left_out(0).reason(), "missing required field 'txt'");
  EXPECT_EQ(response.left_out(0).count(), 10);
  EXPECT_EQ(response.batches_per_epoch(), 10);

  const v1::GetStatusResponse status = GetStatus(server.stub());
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(
      std::vector<std::string>(status.jobs(0).fields().begin(), status.jobs(0).fields().end()),
      (std::vector<std::string>{"txt", "json?"}));
  EXPECT_TRUE(status.jobs(0).image());
  ASSERT_EQ(status.jobs(0).left_out_size(), 1);
  EXPECT_EQ(status.jobs(0).left_out(0).count(), 10);

  Reference reference(dir.path());
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    StreamResult result = StreamAll(server.stub(), "captions", 0, epoch, 0);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    std::multiset<std::string> served;
    for (const v1::Batch& batch : result.batches) {
      for (const std::string& key : CheckTxtJson(batch, written)) served.insert(key);
      for (const v1::SampleInfo& info : batch.samples()) {
        if (!info.valid()) continue;
        // index_in_shard is the index's position, not the plan's among the selected.
        EXPECT_EQ(reference.index().shards[info.shard()].samples[info.index_in_shard()].key,
                  info.key());
      }
    }
    EXPECT_EQ(served.size(), 30u);
    for (const auto& [key, members] : written.members) {
      EXPECT_EQ(served.count(key), members.count("txt")) << key;
    }
  }
}

TEST(FieldsServingTest, MembersOnlyJobSendsNoImage) {
  TempDir dir;
  const Written written = WriteCaptioned(dir.path(), 12, 6, Always);
  InProcessServer server(dir.path());
  v1::RegisterResponse response;
  ASSERT_TRUE(
      Register(server.stub(), FieldsJob("text", 0, 1, 4, {"txt", "json?"}, false), &response).ok());
  EXPECT_FALSE(response.image());
  EXPECT_TRUE(response.image_shape().empty());
  StreamResult result = StreamAll(server.stub(), "text", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.batches.size(), 3u);
  std::set<std::string> served;
  for (const v1::Batch& batch : result.batches) {
    EXPECT_TRUE(batch.shape().empty());
    EXPECT_TRUE(batch.images().empty());
    for (const std::string& key : CheckTxtJson(batch, written)) served.insert(key);
  }
  EXPECT_EQ(served.size(), 12u);
}

TEST(FieldsServingTest, RefusalsNameTheProblem) {
  TempDir dir;
  WriteCaptioned(dir.path(), 12, 6, Always);
  InProcessServer server(dir.path());
  v1::RegisterResponse response;

  grpc::Status unknown = Register(server.stub(), FieldsJob("npy", 0, 1, 2, {"npy"}), &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(unknown.error_message().find("'npy'"), std::string::npos) << unknown.error_message();
  EXPECT_NE(unknown.error_message().find("txt (12 samples)"), std::string::npos)
      << unknown.error_message();
  EXPECT_NE(unknown.error_message().find("jpg (12 samples)"), std::string::npos);
  // Optional, it is served as missing.
  ASSERT_TRUE(Register(server.stub(), FieldsJob("npy?", 0, 1, 2, {"npy?"}), &response).ok());
  EXPECT_EQ(response.num_samples(), 12);

  std::vector<std::string> many;
  for (int i = 0; i < 1000; ++i) many.push_back(absl::StrCat("e", i));
  grpc::Status too_many = Register(server.stub(), FieldsJob("many", 0, 1, 2, many), &response);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(too_many.error_message().find("64"), std::string::npos) << too_many.error_message();

  grpc::Status long_ext =
      Register(server.stub(), FieldsJob("long", 0, 1, 2, {std::string(300, 'a')}), &response);
  EXPECT_EQ(long_ext.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(long_ext.error_message().find("longer than 128"), std::string::npos)
      << long_ext.error_message();
  EXPECT_EQ(Health(server.channel()), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(FieldsServingTest, ACaptionOverMaxMemberBytesLeavesItsSampleOut) {
  TempDir dir;
  const Written written = WriteCaptioned(dir.path(), 16, 8, Always, /*caption_bytes=*/50 << 20);
  server::ServerOptions options;
  options.max_member_bytes = 1 << 20;
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), FieldsJob("big", 0, 1, 3, {"txt", "json?"}), &response).ok());
  EXPECT_EQ(response.num_samples(), 15);
  ASSERT_EQ(response.left_out_size(), 1);
  EXPECT_EQ(response.left_out(0).reason(), "member 'txt' over --max-member-bytes (1048576 bytes)");
  EXPECT_EQ(response.left_out(0).count(), 1);
  StreamResult result = StreamAll(server.stub(), "big", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  std::set<std::string> served;
  for (const v1::Batch& batch : result.batches) {
    for (const std::string& key : CheckTxtJson(batch, written)) served.insert(key);
  }
  EXPECT_EQ(served.size(), 15u);
  EXPECT_EQ(served.count("s0000"), 0u);
  // A job without the caption serves every sample.
  ASSERT_TRUE(Register(server.stub(), FieldsJob("images", 0, 1, 3, {"json?"}), &response).ok());
  EXPECT_EQ(response.num_samples(), 16);
  EXPECT_EQ(Health(server.channel()), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(FieldsServingTest, AJobWhoseLargestMembersOverflowAMessageIsRefusedWithTheNumbers) {
  TempDir dir;
  WriteCaptioned(dir.path(), 8, 8, Always, /*caption_bytes=*/300 << 10);
  server::ServerOptions options;
  options.max_message_bytes = 1 << 20;
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  // Four samples of 300 KiB captions do not fit 1 MiB; without the caption they do.
  grpc::Status refused =
      Register(server.stub(), FieldsJob("big", 0, 1, 4, {"txt", "json?"}), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("a batch of 4 samples whose members take 307"),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("max message size 1048576"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(Register(server.stub(), FieldsJob("small", 0, 1, 4, {"json?"}), &response).ok());
  EXPECT_TRUE(Register(server.stub(), FieldsJob("two", 0, 1, 2, {"txt"}), &response).ok());
}

TEST(FieldsServingTest, MemberBytesCountTowardTheBatchMemory) {
  // Captions of 64 KiB: a batch of 4 holds 256 KiB of them beside 4 x 3 x 40 x 40 pixels.
  TempDir big;
  pack::ShardWriterOptions writer_options;
  writer_options.out_dir = big.path();
  writer_options.per_shard = 8;
  pack::ShardWriter writer(writer_options);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        writer
            .AddSample(absl::StrFormat("s%04d", i),
                       {{"jpg", SmallJpeg(i)}, {"cls", "1"}, {"txt", std::string(64 << 10, 'c')}})
            .ok());
  }
  ASSERT_TRUE(writer.Close().ok());
  server::ServerOptions options;
  options.max_batch_memory_bytes = 128 << 10;  // pixels fit (19200 B), captions do not
  InProcessServer server(big.path(), options);
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), FieldsJob("pixels", 0, 1, 4, {}), &response).ok());
  EXPECT_TRUE(StreamAll(server.stub(), "pixels", 0, 0, 0).status.ok());
  ASSERT_TRUE(Register(server.stub(), FieldsJob("captions", 0, 1, 4, {"txt"}), &response).ok());
  StreamResult refused = StreamAll(server.stub(), "captions", 0, 0, 0);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status.error_message().find("batch memory"), std::string::npos)
      << refused.status.error_message();
}

TEST(FieldsServingTest, ResumeAndElasticResumeServeTheSameSamples) {
  TempDir dir;
  const auto has_txt = [](int i) { return i % 5 != 2; };  // 40 of 50 have a caption
  const Written written = WriteCaptioned(dir.path(), 50, 12, has_txt);
  InProcessServer server(dir.path());
  v1::RegisterResponse response;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(
        Register(server.stub(), FieldsJob("w2", rank, 2, 3, {"txt", "json?"}), &response).ok());
  }
  EXPECT_EQ(response.num_samples(), 40);
  // A stream resumed from batch 2 sends what the whole stream sent from there.
  StreamResult whole = StreamAll(server.stub(), "w2", 0, 1, 0);
  StreamResult resumed = StreamAll(server.stub(), "w2", 0, 1, 2);
  ASSERT_TRUE(whole.status.ok() && resumed.status.ok());
  ASSERT_EQ(resumed.batches.size() + 2, whole.batches.size());
  for (size_t b = 0; b < resumed.batches.size(); ++b) {
    EXPECT_EQ(resumed.batches[b].SerializeAsString(), whole.batches[b + 2].SerializeAsString());
  }

  // Elastic: 2 batches of both ranks of epoch 1 on 2 ranks (12 positions), the rest on
  // one rank with batch 5: every captioned sample exactly once.
  std::multiset<std::string> served;
  for (int rank = 0; rank < 2; ++rank) {
    StreamResult first = StreamAll(server.stub(), "w2", rank, 1, 0);
    ASSERT_TRUE(first.status.ok());
    for (size_t b = 0; b < 2; ++b) {
      for (const std::string& key : CheckTxtJson(first.batches[b], written)) served.insert(key);
    }
  }
  v1::RegisterResponse w1;
  ASSERT_TRUE(Register(server.stub(), FieldsJob("w1", 0, 1, 5, {"txt", "json?"}), &w1).ok());
  EXPECT_EQ(w1.job_fingerprint(), response.job_fingerprint());
  v1::StreamBatchesRequest rest;
  rest.set_job_id("w1");
  rest.set_epoch(1);
  rest.set_sample_offset(12);
  rest.set_job_fingerprint(w1.job_fingerprint());
  StreamResult tail = StreamAll(server.stub(), rest);
  ASSERT_TRUE(tail.status.ok()) << tail.status.error_message();
  EXPECT_EQ(tail.batches.size(), 6u);  // ceil(28 / 5)
  for (const v1::Batch& batch : tail.batches) {
    for (const std::string& key : CheckTxtJson(batch, written)) served.insert(key);
  }
  EXPECT_EQ(served.size(), 40u);
  for (const auto& [key, members] : written.members) {
    EXPECT_EQ(served.count(key), members.count("txt")) << key;
  }
}

// Every batch of epochs 0 and 1 of both ranks of job `job` (fields txt and json?),
// serialized: the same bytes wherever the shards are.
std::vector<std::string> TwoEpochsWithFields(InProcessServer& server, const std::string& job) {
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse response;
    grpc::Status status =
        Register(server.stub(), FieldsJob(job, rank, 2, 4, {"txt", "json?"}), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  std::vector<std::string> batches;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int rank = 0; rank < 2; ++rank) {
      StreamResult result = StreamAll(server.stub(), job, rank, epoch, 0);
      EXPECT_TRUE(result.status.ok()) << result.status.error_message();
      for (const v1::Batch& batch : result.batches) batches.push_back(batch.SerializeAsString());
    }
  }
  return batches;
}

TEST(FieldsServingTest, FieldsFromHttpAndS3EqualTheLocalOnesAndComeFromTheDiskCache) {
  TempDir dir;
  WriteCaptioned(dir.path(), 45, 20, [](int i) { return i % 9 != 4; });
  std::vector<std::string> want;
  {
    InProcessServer local(dir.path());
    want = TwoEpochsWithFields(local, "job");
  }
  ASSERT_EQ(want.size(), 2u * 2u * 5u);  // 40 captioned samples, 2 ranks of batch 4
  server::ServerOptions options;
  options.remote.fetch.first_backoff = absl::Milliseconds(20);
  options.remote.fetch.request_deadline = absl::Seconds(30);

  auto nginx = testing_util::NginxServer::Start(dir.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  InProcessServer http(absl::StrCat((*nginx)->url(), "/shard-{000000..000002}.tar"), options);
  EXPECT_EQ(TwoEpochsWithFields(http, "job"), want);

  auto s3 = testing_util::S3rverServer::Start();
  ASSERT_TRUE(s3.ok()) << s3.status();
  ASSERT_TRUE((*s3)->CreateBucket("data").ok());
  ASSERT_TRUE((*s3)->PutDirectory("data", "captions/", dir.path()).ok());
  TempDir cache;
  options.remote.cache_dir = cache.path();
  options.remote.stores.s3.endpoint = (*s3)->endpoint();
  options.remote.stores.s3.region = "us-east-1";
  ::setenv("AWS_ACCESS_KEY_ID", testing_util::S3rverServer::kAccessKeyId, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "any", 1);
  InProcessServer remote("s3://data/captions", options);
  EXPECT_EQ(TwoEpochsWithFields(remote, "job"), want);
  // Epoch 1 again, now that the cache holds what epoch 0 and 1 read: nothing remote.
  const v1::GetStatusResponse before = GetStatus(remote.stub());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(StreamAll(remote.stub(), "job", rank, 1, 0).status.ok());
  }
  const v1::GetStatusResponse after = GetStatus(remote.stub());
  EXPECT_EQ(after.remote_requests(), before.remote_requests());
  EXPECT_GT(after.cache_hits(), before.cache_hits());
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
}

TEST(FieldsServingTest, ReplicasAgreeOnTheFingerprintOfAJobWithFields) {
  TempDir dir;
  WriteCaptioned(dir.path(), 20, 10, Always, /*caption_bytes=*/3 << 20);
  server::ServerOptions roomy;
  roomy.max_member_bytes = 8 << 20;
  server::ServerOptions roomier;
  roomier.max_member_bytes = 16 << 20;
  server::ServerOptions tight;
  tight.max_member_bytes = 1 << 20;  // leaves sample 0 out of a job with captions
  InProcessServer a(dir.path(), roomy);
  InProcessServer b(dir.path(), roomier);
  InProcessServer c(dir.path(), tight);
  auto fingerprint = [](InProcessServer& server, const std::vector<std::string>& fields) {
    v1::RegisterResponse response;
    grpc::Status status = Register(server.stub(), FieldsJob("job", 0, 1, 2, fields), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job_fingerprint();
  };
  const std::string with_a = fingerprint(a, {"txt", "json?"});
  EXPECT_EQ(with_a, fingerprint(b, {"txt", "json?"}));
  EXPECT_NE(with_a, fingerprint(c, {"txt", "json?"}));
}

}  // namespace
}  // namespace shardcast::server_testing

// The rank's checks of what a server says, on made-up registrations and batches: each
// wrong figure is refused with an error that names the job, the rank, where in the
// epoch and what was wrong; a right one passes.
#include "client/checks/stream_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/rpc/wire_batch_checks.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::shardcast::v1;

// 2 images of 3x4x5 per batch, 10 batches per epoch.
v1::RegisterResponse Registration() {
  v1::RegisterResponse r;
  r.set_batches_per_epoch(10);
  r.set_batch_size(2);
  r.set_world_size(4);
  r.set_job_fingerprint("fp-1");
  for (int64_t d : {3, 4, 5}) r.add_image_shape(d);
  return r;
}

// Batch `index` of `epoch` as the registration says it must be.
v1::Batch GoodBatch(int64_t epoch, int64_t index) {
  v1::Batch batch;
  batch.set_epoch(epoch);
  batch.set_index(index);
  for (int64_t d : {2, 3, 4, 5}) batch.add_shape(d);
  for (int i = 0; i < 2; ++i) {
    batch.add_labels(i);
    batch.add_samples()->set_key("k" + std::to_string(i));
  }
  batch.set_images(std::string(2 * 3 * 4 * 5, '\x7f'));
  return batch;
}

WireBatch Wire(const v1::Batch& batch) {
  std::vector<grpc::Slice> slices;
  slices.emplace_back(batch.SerializeAsString());
  WireBatch wire;
  EXPECT_TRUE(WireBatch::Parse(std::move(slices), &wire).ok());
  return wire;
}

const StreamPosition kAt{"job-a", 1, /*epoch=*/2, /*batch=*/3};

TEST(StreamChecksTest, ARegistrationThatSizesABatchPasses) {
  EXPECT_TRUE(CheckRegistration(Registration(), "server s").ok());
}

TEST(StreamChecksTest, ARegistrationNoBatchCanBeReceivedWithIsDataLossNamingTheFigure) {
  struct Case {
    std::string name;
    void (*spoil)(v1::RegisterResponse*);
    std::string says;
  };
  const std::vector<Case> cases = {
      {"no batches", [](v1::RegisterResponse* r) { r->set_batches_per_epoch(0); },
       "batches_per_epoch 0 (want >= 1)"},
      {"batch size 0", [](v1::RegisterResponse* r) { r->set_batch_size(0); }, "batch size 0"},
      {"batch size too big", [](v1::RegisterResponse* r) { r->set_batch_size(1 << 20); },
       "batch size 1048576"},
      {"two extents", [](v1::RegisterResponse* r) { r->mutable_image_shape()->RemoveLast(); },
       "image shape [3,4]"},
      {"no pixels", [](v1::RegisterResponse* r) { r->set_image_shape(1, 0); },
       "image shape [3,0,5]"},
      {"extent of 2^32", [](v1::RegisterResponse* r) { r->set_image_shape(2, int64_t{1} << 32); },
       "image shape [3,4,4294967296]"},
      {"more than a message holds",
       [](v1::RegisterResponse* r) {
         r->set_batch_size(1 << 16);
         r->set_image_shape(1, 16384);
         r->set_image_shape(2, 16384);
       },
       "more than one message holds"},
  };
  for (const Case& c : cases) {
    v1::RegisterResponse r = Registration();
    c.spoil(&r);
    const absl::Status s = CheckRegistration(r, "server s, registering rank 1 of job 'a',");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_THAT(s.message(), HasSubstr("server s, registering rank 1 of job 'a', answered a "
                                       "registration no batch can be received with"))
        << c.name;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.name;
  }
}

TEST(StreamChecksTest, TheBatchDueWithTheRegisteredShapePasses) {
  EXPECT_TRUE(CheckBatch(Wire(GoodBatch(2, 3)), Registration(), kAt, 10).ok());
}

TEST(StreamChecksTest, ABatchOutOfSequenceOrPastTheLastIsDataLoss) {
  absl::Status s = CheckBatch(Wire(GoodBatch(2, 4)), Registration(), kAt, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("job 'job-a' rank 1 epoch 2 batch 3: server sent (epoch 2, "
                                     "index 4) instead; the stream is out of sequence"));
  s = CheckBatch(Wire(GoodBatch(1, 3)), Registration(), kAt, 10);
  EXPECT_THAT(s.message(), HasSubstr("(epoch 1, index 3) instead"));
  s = CheckBatch(Wire(GoodBatch(2, 3)), Registration(), kAt, /*epoch_batches=*/3);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr("job 'job-a' rank 1 epoch 2: server sent batch 3 past the last one (2)"));
}

TEST(StreamChecksTest, ABatchOfAnotherShapeOrCountIsDataLoss) {
  v1::Batch batch = GoodBatch(2, 3);
  batch.set_shape(2, 8);
  absl::Status s = CheckBatch(Wire(batch), Registration(), kAt, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("batch shape [2,3,8,5] does not match the registered batch "
                                     "size 2 and image shape [3,4,5]"));
  batch = GoodBatch(2, 3);
  batch.set_images(std::string(7, 'x'));
  s = CheckBatch(Wire(batch), Registration(), kAt, 10);
  EXPECT_THAT(s.message(),
              HasSubstr("7 image bytes, 2 labels, 2 samples for shape [2,3,4,5] (want 120, 2, 2)"));
  batch = GoodBatch(2, 3);
  batch.add_labels(9);
  s = CheckBatch(Wire(batch), Registration(), kAt, 10);
  EXPECT_THAT(s.message(), HasSubstr("120 image bytes, 3 labels, 2 samples"));
}

TEST(StreamChecksTest, TheSameJobAfterAReconnectPasses) {
  EXPECT_TRUE(SameJob(Registration(), Registration(), "server s", kAt).ok());
}

TEST(StreamChecksTest, AChangedJobIsFailedPreconditionMarkedAsJobChanged) {
  struct Case {
    void (*change)(v1::RegisterResponse*);
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](v1::RegisterResponse* r) { r->set_job_fingerprint("fp-2"); },
       "job fingerprint fp-2 (was fp-1: other data"},
      {[](v1::RegisterResponse* r) { r->set_world_size(8); },
       "world size 8 and batch size 2 (were 4 and 2)"},
      {[](v1::RegisterResponse* r) { r->set_batch_size(3); },
       "world size 4 and batch size 3 (were 4 and 2)"},
      {[](v1::RegisterResponse* r) { r->set_batches_per_epoch(9); },
       "9 batches per epoch (was 10)"},
  };
  for (const Case& c : cases) {
    v1::RegisterResponse now = Registration();
    c.change(&now);
    const absl::Status s = SameJob(Registration(), now, "server s", kAt);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.says;
    EXPECT_TRUE(IsJobChanged(s)) << s;
    EXPECT_THAT(s.message(),
                HasSubstr("job 'job-a' rank 1: after reconnecting, server s has " + c.says));
    EXPECT_THAT(s.message(), HasSubstr("cannot resume epoch 2 at batch 3"));
  }
  EXPECT_FALSE(IsJobChanged(absl::FailedPreconditionError("a server's own refusal")));
}

TEST(StreamChecksTest, AnotherReplicaIsNamedWithWhereTheRankRegistered) {
  EXPECT_EQ(ResumedServer("a:1", "a:1"), "server a:1");
  EXPECT_THAT(ResumedServer("a:1", "b:2"),
              HasSubstr("replica b:2 (the rank registered at a:1: the replicas serve other data"));
}

TEST(StreamChecksTest, ClosedIsToldApartFromInterrupted) {
  const absl::Status closed = ClosedError("job-a", 1);
  const absl::Status interrupted = InterruptedError("job-a", 1);
  EXPECT_EQ(closed.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(interrupted.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(IsClosed(closed));
  EXPECT_FALSE(IsClosed(interrupted));
  EXPECT_EQ(closed.message(), "job 'job-a' rank 1: the stream was closed");
  EXPECT_EQ(interrupted.message(), "job 'job-a' rank 1: interrupted while waiting");
}

// A job of fields alone: batch size 2, fields "txt" and "json?", no image shape.
v1::RegisterResponse FieldsOnlyRegistration() {
  v1::RegisterResponse r = Registration();
  r.clear_image_shape();
  r.set_image(false);
  r.add_fields("txt");
  r.add_fields("json?");
  return r;
}

// A batch of that job: sample 0 has both members, sample 1 no json.
v1::Batch FieldsOnlyBatch(int64_t epoch, int64_t index) {
  v1::Batch batch;
  batch.set_epoch(epoch);
  batch.set_index(index);
  for (int i = 0; i < 2; ++i) {
    batch.add_labels(-1);
    v1::SampleInfo* sample = batch.add_samples();
    sample->set_key("k" + std::to_string(i));
    sample->set_valid(true);
    v1::FieldValue* txt = sample->add_fields();
    txt->set_present(true);
    txt->set_ext("txt");
    txt->set_data("a caption");
    v1::FieldValue* json = sample->add_fields();
    if (i == 0) {
      json->set_present(true);
      json->set_ext("json");
      json->set_data("{}");
    }
  }
  return batch;
}

TEST(StreamChecksTest, AJobWithoutImagesIsOneOfFieldsWithNoShape) {
  EXPECT_TRUE(RegisteredWithImages(Registration()));  // a server older than `image`
  v1::RegisterResponse with_image = Registration();
  with_image.set_image(true);
  EXPECT_TRUE(RegisteredWithImages(with_image));
  EXPECT_FALSE(RegisteredWithImages(FieldsOnlyRegistration()));
  EXPECT_TRUE(CheckRegistration(FieldsOnlyRegistration(), "server s").ok());
  EXPECT_TRUE(CheckBatch(Wire(FieldsOnlyBatch(2, 3)), FieldsOnlyRegistration(), kAt, 10).ok());
}

TEST(StreamChecksTest, ARegistrationWithoutImagesAndFieldsOrWithBadFieldsIsDataLoss) {
  v1::RegisterResponse nothing = FieldsOnlyRegistration();
  nothing.clear_fields();
  absl::Status s = CheckRegistration(nothing, "server s");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("a job without images and without fields"));
  // Image shape [3,H,W] with image true: today's checks.
  v1::RegisterResponse no_shape = Registration();
  no_shape.set_image(true);
  no_shape.clear_image_shape();
  EXPECT_THAT(CheckRegistration(no_shape, "server s").message(), HasSubstr("image shape []"));
  v1::RegisterResponse bad = FieldsOnlyRegistration();
  bad.add_fields("../etc");
  s = CheckRegistration(bad, "server s");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("fields: "));
  v1::RegisterResponse twice = FieldsOnlyRegistration();
  twice.add_fields("txt");
  EXPECT_EQ(CheckRegistration(twice, "server s").code(), absl::StatusCode::kDataLoss);
}

TEST(StreamChecksTest, TheServerMustRegisterTheFieldsAndImageAsked) {
  v1::RegisterRequest job;
  job.add_fields("TXT");  // the server answers specs normalized: lower case
  job.add_fields("json?");
  job.set_image(false);
  EXPECT_TRUE(CheckRegisteredAsAsked(job, FieldsOnlyRegistration(), "server s").ok());
  // Nothing asked: whatever the server's defaults are.
  EXPECT_TRUE(CheckRegisteredAsAsked(v1::RegisterRequest(), FieldsOnlyRegistration(), "s").ok());

  // A server older than fields answers a job of images alone.
  v1::RegisterResponse old = Registration();
  old.set_server_version("0.9");
  absl::Status s = CheckRegisteredAsAsked(job, old, "server s,");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("server s, registered fields [] for the fields [txt,json?] "
                                     "asked"));
  EXPECT_THAT(s.message(), HasSubstr("version '0.9'"));

  v1::RegisterRequest required = job;
  required.set_fields(1, "json");
  s = CheckRegisteredAsAsked(required, FieldsOnlyRegistration(), "server s");
  EXPECT_THAT(s.message(), HasSubstr("fields [txt,json?] for the fields [txt,json] asked"));

  v1::RegisterRequest images;
  images.set_image(true);
  images.add_fields("txt");
  images.add_fields("json?");
  s = CheckRegisteredAsAsked(images, FieldsOnlyRegistration(), "server s");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("a job without images for one with images"));
  v1::RegisterRequest no_images;
  no_images.set_image(false);
  s = CheckRegisteredAsAsked(no_images, Registration(), "server s");
  EXPECT_THAT(s.message(), HasSubstr("a job with images for one without"));
}

TEST(StreamChecksTest, ABatchOfAJobWithoutImagesWithPixelsOrAShapeIsDataLoss) {
  v1::Batch batch = FieldsOnlyBatch(2, 3);
  batch.set_images("xx");
  absl::Status s = CheckBatch(Wire(batch), FieldsOnlyRegistration(), kAt, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("job 'job-a' rank 1 epoch 2 batch 3: shape [], 2 image "
                                     "bytes, 2 labels, 2 samples in a batch of a job without "
                                     "images (want no shape, no image bytes, 2 labels and 2 "
                                     "samples)"));
  batch = FieldsOnlyBatch(2, 3);
  for (int64_t d : {2, 3, 4, 5}) batch.add_shape(d);
  EXPECT_EQ(CheckBatch(Wire(batch), FieldsOnlyRegistration(), kAt, 10).code(),
            absl::StatusCode::kDataLoss);
  batch = FieldsOnlyBatch(2, 3);
  batch.add_samples();
  EXPECT_EQ(CheckBatch(Wire(batch), FieldsOnlyRegistration(), kAt, 10).code(),
            absl::StatusCode::kDataLoss);
}

TEST(StreamChecksTest, SamplesMustCarryOneValuePerFieldAndPaddingNone) {
  struct Case {
    std::string name;
    void (*spoil)(v1::Batch*);
    std::string says;
  };
  const std::vector<Case> cases = {
      {"a value short", [](v1::Batch* b) { b->mutable_samples(1)->mutable_fields()->RemoveLast(); },
       "sample 1 (key 'k1'): 1 field values for the 2 registered fields [txt,json?]"},
      {"a value too many", [](v1::Batch* b) { b->mutable_samples(0)->add_fields(); },
       "sample 0 (key 'k0'): 3 field values for the 2 registered fields"},
      {"padding with values", [](v1::Batch* b) { b->mutable_samples(1)->set_valid(false); },
       "sample 1 (key 'k1'): padding with 2 field values (want none)"},
      {"a required one missing",
       [](v1::Batch* b) { b->mutable_samples(0)->mutable_fields(0)->set_present(false); },
       "sample 0 (key 'k0'): required field 'txt' reported missing"},
      {"a missing one with bytes",
       [](v1::Batch* b) { b->mutable_samples(1)->mutable_fields(1)->set_data("x"); },
       "sample 1 (key 'k1'): missing field 'json' with 1 bytes"},
  };
  for (const Case& c : cases) {
    v1::Batch batch = FieldsOnlyBatch(2, 3);
    c.spoil(&batch);
    const absl::Status s = CheckBatch(Wire(batch), FieldsOnlyRegistration(), kAt, 10);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_THAT(s.message(), HasSubstr("job 'job-a' rank 1 epoch 2 batch 3 " + c.says)) << c.name;
  }
  // Padding carries no values; with images the same rules hold.
  v1::Batch padded = FieldsOnlyBatch(2, 3);
  padded.mutable_samples(1)->set_valid(false);
  padded.mutable_samples(1)->clear_fields();
  EXPECT_TRUE(CheckBatch(Wire(padded), FieldsOnlyRegistration(), kAt, 10).ok());
  v1::RegisterResponse images_and_txt = Registration();
  images_and_txt.add_fields("txt");
  v1::Batch batch = GoodBatch(2, 3);
  batch.mutable_samples(0)->set_valid(true);
  EXPECT_THAT(CheckBatch(Wire(batch), images_and_txt, kAt, 10).message(),
              HasSubstr("sample 0 (key 'k0'): 0 field values for the 1 registered fields [txt]"));
  batch.mutable_samples(0)->add_fields()->set_present(true);
  EXPECT_TRUE(CheckBatch(Wire(batch), images_and_txt, kAt, 10).ok());
}

// --- Encoded delivery ---

// Registration() in encoded delivery of 4 x 4 center crops.
v1::RegisterResponse EncodedRegistration(v1::TransformMode mode = v1::TRANSFORM_MODE_CENTER) {
  v1::RegisterResponse r = Registration();
  r.set_image_shape(2, 4);
  r.set_delivery(v1::IMAGE_DELIVERY_ENCODED);
  r.mutable_transform()->set_mode(mode);
  return r;
}

// A 10 x 8 image resized to 5 x 4, the 4 x 4 square at (1, 0) of that.
v1::EncodedImage CenterImage() {
  v1::EncodedImage e;
  e.set_data("jpeg bytes");
  e.set_source_width(10);
  e.set_source_height(8);
  e.set_resize_width(5);
  e.set_resize_height(4);
  e.set_left(1);
  e.set_width(4);
  e.set_height(4);
  e.set_output_size(4);
  return e;
}

// Batch `index` of `epoch` in encoded delivery: no pixels, an image per sample.
v1::Batch GoodEncodedBatch(int64_t epoch, int64_t index) {
  v1::Batch batch = GoodBatch(epoch, index);
  batch.set_shape(3, 4);
  batch.clear_images();
  for (v1::SampleInfo& sample : *batch.mutable_samples()) {
    sample.set_valid(true);
    *sample.mutable_encoded() = CenterImage();
  }
  return batch;
}

TEST(StreamChecksTest, AnEncodedBatchWithAnImageAndCropPerSamplePasses) {
  EXPECT_TRUE(CheckBatch(Wire(GoodEncodedBatch(2, 3)), EncodedRegistration(), kAt, 10).ok());
  v1::Batch padded = GoodEncodedBatch(2, 3);
  padded.mutable_samples(1)->set_valid(false);
  padded.mutable_samples(1)->clear_encoded();
  v1::SampleInfo* substituted = padded.mutable_samples(0);
  substituted->set_substituted(true);
  substituted->mutable_encoded()->clear_data();
  EXPECT_TRUE(CheckBatch(Wire(padded), EncodedRegistration(), kAt, 10).ok());

  // A random crop of a lossless cut: the window counts from the cut.
  v1::Batch cut = GoodEncodedBatch(2, 3);
  for (v1::SampleInfo& sample : *cut.mutable_samples()) {
    v1::EncodedImage* e = sample.mutable_encoded();
    e->set_cut_left(8);
    e->set_cut_top(0);
    e->set_cut_width(2);
    e->set_cut_height(8);
    e->set_left(0);
    e->set_top(2);
    e->set_width(2);
    e->set_height(6);
  }
  EXPECT_TRUE(CheckBatch(Wire(cut), EncodedRegistration(v1::TRANSFORM_MODE_RANDOM), kAt, 10).ok());
}

TEST(StreamChecksTest, AMalformedEncodedBatchIsDataLossNamingBatchAndSample) {
  struct Case {
    std::string name;
    void (*spoil)(v1::Batch*);
    std::string says;
  };
  const std::vector<Case> cases = {
      {"pixels", [](v1::Batch* b) { b->set_images(std::string(2 * 3 * 4 * 4, 'x')); },
       "96 image bytes"},
      {"no image", [](v1::Batch* b) { b->mutable_samples(1)->clear_encoded(); },
       "sample 1 (key 'k1'): no encoded image"},
      {"other size",
       [](v1::Batch* b) { b->mutable_samples(0)->mutable_encoded()->set_output_size(5); },
       "encoded output size 5 in a batch of 4 x 4 images"},
      {"crop outside", [](v1::Batch* b) { b->mutable_samples(1)->mutable_encoded()->set_left(2); },
       "crop 4 x 4 at (2, 0) outside its 5 x 4 image"},
      {"not square", [](v1::Batch* b) { b->mutable_samples(1)->mutable_encoded()->set_height(3); },
       "center crop 4 x 3"},
      {"no source",
       [](v1::Batch* b) { b->mutable_samples(0)->mutable_encoded()->set_source_width(0); },
       "encoded source size 0 x 8"},
      {"cut of a center crop",
       [](v1::Batch* b) { b->mutable_samples(0)->mutable_encoded()->set_cut_width(8); },
       "cut 8 x 0 at (0, 0)"},
      {"padding with an image", [](v1::Batch* b) { b->mutable_samples(1)->set_valid(false); },
       "sample 1 (key 'k1'): padding with an encoded image"},
      {"empty data", [](v1::Batch* b) { b->mutable_samples(0)->mutable_encoded()->clear_data(); },
       "without data not marked substituted"},
  };
  for (const Case& c : cases) {
    v1::Batch batch = GoodEncodedBatch(2, 3);
    c.spoil(&batch);
    const absl::Status s = CheckBatch(Wire(batch), EncodedRegistration(), kAt, 10);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_THAT(s.message(), HasSubstr("job 'job-a' rank 1 epoch 2 batch 3")) << c.name;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.name;
  }
  // A random crop of a cut must lie inside the cut.
  v1::Batch batch = GoodEncodedBatch(2, 3);
  v1::EncodedImage* e = batch.mutable_samples(0)->mutable_encoded();
  e->set_cut_left(8);
  e->set_cut_width(2);
  e->set_cut_height(8);
  EXPECT_THAT(
      CheckBatch(Wire(batch), EncodedRegistration(v1::TRANSFORM_MODE_RANDOM), kAt, 10).message(),
      HasSubstr("crop 4 x 4 at (1, 0) outside its 2 x 8 image"));
}

TEST(StreamChecksTest, TheServerMustGrantTheDeliveryAsked) {
  v1::RegisterRequest encoded;
  encoded.set_delivery(v1::IMAGE_DELIVERY_ENCODED);
  v1::RegisterRequest server;
  server.set_delivery(v1::IMAGE_DELIVERY_SERVER);
  EXPECT_TRUE(CheckRegisteredAsAsked(encoded, EncodedRegistration(), "server s").ok());
  // A server older than delivery modes leaves it unset and sends pixels.
  v1::RegisterResponse old = Registration();
  old.set_server_version("0.9");
  EXPECT_TRUE(CheckRegisteredAsAsked(server, old, "server s").ok());
  absl::Status s = CheckRegisteredAsAsked(encoded, old, "server s,");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("server s, registered delivery IMAGE_DELIVERY_UNSPECIFIED "
                                     "for the delivery IMAGE_DELIVERY_ENCODED asked"));
  EXPECT_THAT(s.message(), HasSubstr("version '0.9'"));
  s = CheckRegisteredAsAsked(server, EncodedRegistration(), "server s");
  EXPECT_THAT(s.message(), HasSubstr("delivery IMAGE_DELIVERY_ENCODED for the delivery "
                                     "IMAGE_DELIVERY_SERVER asked"));
}
}  // namespace
}  // namespace shardcast::client

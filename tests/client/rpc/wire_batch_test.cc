// WireBatch::Parse: a Batch message given as gRPC's receive slices, cut anywhere, gives
// the header protobuf would parse and the image bytes as views; malformed messages
// are errors, never a read past the end.
#include "client/rpc/wire_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;

v1::Batch SampleBatch(size_t image_bytes) {
  v1::Batch batch;
  batch.set_epoch(3);
  batch.set_index(300);  // a two-byte varint
  for (int i = 0; i < 2; ++i) {
    batch.add_labels(i == 0 ? -1 : 7);  // -1: a ten-byte varint
    v1::SampleInfo* info = batch.add_samples();
    info->set_key("key" + std::to_string(i));
    info->set_shard(i);
    info->set_valid(i != 0);
  }
  for (int64_t d : {2, 3, 4, 4}) batch.add_shape(d);
  std::string images(image_bytes, '\0');
  for (size_t i = 0; i < image_bytes; ++i) images[i] = static_cast<char>(i * 37 + 11);
  batch.set_images(images);
  return batch;
}

std::vector<grpc::Slice> Cut(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t from = 0;
  for (size_t to : cuts) {
    slices.emplace_back(bytes.data() + from, to - from);
    from = to;
  }
  slices.emplace_back(bytes.data() + from, bytes.size() - from);
  return slices;
}

void ExpectParsedAs(const v1::Batch& want, const WireBatch& got) {
  v1::Batch header = want;
  header.clear_images();
  EXPECT_EQ(got.header().SerializeAsString(), header.SerializeAsString());
  EXPECT_EQ(got.image_bytes(), static_cast<int64_t>(want.images().size()));
  EXPECT_EQ(got.ImagesToString(), want.images());
}

TEST(WireBatchTest, EveryCutOfTheMessageParsesTheSame) {
  const v1::Batch batch = SampleBatch(96);
  const std::string bytes = batch.SerializeAsString();
  for (size_t a = 0; a <= bytes.size(); ++a) {
    for (size_t b = a; b <= bytes.size(); b += 7) {
      WireBatch got;
      ASSERT_TRUE(WireBatch::Parse(Cut(bytes, {a, b}), &got).ok()) << "cuts " << a << "," << b;
      ExpectParsedAs(batch, got);
    }
  }
}

TEST(WireBatchTest, OneSliceGivesOneChunkPointingIntoIt) {
  const v1::Batch batch = SampleBatch(4096);
  const std::string bytes = batch.SerializeAsString();
  std::vector<grpc::Slice> slices = Cut(bytes, {});
  const uint8_t* begin = slices[0].begin();
  const uint8_t* end = slices[0].end();
  WireBatch got;
  ASSERT_TRUE(WireBatch::Parse(std::move(slices), &got).ok());
  ASSERT_EQ(got.image_chunks().size(), 1u);
  EXPECT_GE(got.image_chunks()[0].data(), begin);  // a view, not a copy
  EXPECT_EQ(got.image_chunks()[0].data() + got.image_chunks()[0].size(), end);
  ExpectParsedAs(batch, got);
}

TEST(WireBatchTest, JoinImagesMakesOneChunkOfTheSameBytes) {
  const v1::Batch batch = SampleBatch(4096);
  const std::string bytes = batch.SerializeAsString();
  for (std::vector<size_t> cuts : {std::vector<size_t>{},
                                   {bytes.size() - 1000},
                                   {bytes.size() - 3000, bytes.size() - 2000, bytes.size() - 7}}) {
    WireBatch got;
    ASSERT_TRUE(WireBatch::Parse(Cut(bytes, cuts), &got).ok());
    const size_t pieces = got.image_chunks().size();
    const uint8_t* first = got.image_chunks()[0].data();
    got.JoinImages();
    ASSERT_EQ(got.image_chunks().size(), 1u);
    // One piece already: left where it was; several: copied into one block.
    EXPECT_EQ(got.image_chunks()[0].data() == first, pieces == 1) << pieces << " pieces";
    ExpectParsedAs(batch, got);
  }
}

TEST(WireBatchTest, FieldOrderAndRepeatsFollowProtobuf) {
  // images first, then the header fields, then images again: the last one wins, as
  // protobuf's parser decides for a bytes field.
  v1::Batch first = SampleBatch(10), last = SampleBatch(20);
  v1::Batch images_only;
  images_only.set_images(first.images());
  std::string bytes = images_only.SerializeAsString() + last.SerializeAsString();
  v1::Batch want;
  ASSERT_TRUE(want.ParseFromString(bytes));
  WireBatch got;
  ASSERT_TRUE(WireBatch::Parse(Cut(bytes, {5, 33}), &got).ok());
  ExpectParsedAs(want, got);
}

TEST(WireBatchTest, EveryTruncationIsAnErrorOrAValidPrefix) {
  const std::string bytes = SampleBatch(64).SerializeAsString();
  int errors = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::string prefix = bytes.substr(0, len);
    WireBatch got;
    absl::Status s = WireBatch::Parse(Cut(prefix, {len / 2}), &got);
    v1::Batch reference;
    // Whatever protobuf accepts, we accept with the same content; the rest is an error.
    if (reference.ParseFromString(prefix)) {
      ASSERT_TRUE(s.ok()) << len << ": " << s;
      ExpectParsedAs(reference, got);
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << len;
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(WireBatchTest, MalformedMessagesSayWhatIsWrong) {
  struct Case {
    std::string bytes;
    const char* message;
  } cases[] = {
      {std::string("\x7a\x80\x80\x04", 4) + "short", "claims 65536 bytes, 5 left"},  // images
      {std::string("\x22\x05"
                   "ab",
                   4),
       "claims 5 bytes"},                       // samples
      {std::string("\x0b", 1), "wire type 3"},  // group
      {std::string("\x00\x01", 2), "field number 0"},
      {std::string("\x08\xff\xff", 3), "truncated varint"},
      {std::string("\x09\x01\x02", 3), "truncated fixed-size field"},
      {std::string("\x22\x02\xff\xff", 4), "header fields do not parse"},  // bad SampleInfo
  };
  for (const Case& c : cases) {
    WireBatch got;
    absl::Status s = WireBatch::Parse(Cut(c.bytes, {1}), &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

// What gRPC's Read() cannot say (it returns false, as at the stream's end): the reader
// asks the message why, so a malformed batch fails the stream instead of ending it.
TEST(WireBatchTest, AFailedDeserializeIsKeptInTheMessage) {
  const std::string good = SampleBatch(96).SerializeAsString();
  WireBatch got;
  std::vector<grpc::Slice> slices = Cut(good, {10});
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  ASSERT_TRUE((grpc::SerializationTraits<WireBatch>::Deserialize(&buffer, &got)).ok());
  EXPECT_TRUE(got.parse_error().ok());

  const std::string bad = std::string("\x7a\x80\x80\x04", 4) + "short";
  grpc::Slice slice(bad.data(), bad.size());
  grpc::ByteBuffer bad_buffer(&slice, 1);
  EXPECT_FALSE((grpc::SerializationTraits<WireBatch>::Deserialize(&bad_buffer, &got)).ok());
  EXPECT_THAT(got.parse_error().message(), HasSubstr("claims 65536 bytes, 5 left"));
}

}  // namespace
}  // namespace shardcast::client

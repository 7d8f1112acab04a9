// The zero-copy wire encoding: two slices, the second one the batch buffer itself,
// that parse as an ordinary Batch; the buffer lives exactly as long as gRPC holds it.
#include "server/rpc/batch_encoding.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace shardcast::server {
namespace {

std::shared_ptr<AssembledBatch> MakeBatch(int batch_size, int crop, std::atomic<int64_t>* gauge) {
  std::shared_ptr<AssembledBatch> batch = *AssembledBatch::Create(batch_size, crop, gauge);
  auto& header = batch->header();
  header.set_epoch(3);
  header.set_index(17);
  for (int64_t dim : {int64_t{batch_size}, int64_t{3}, int64_t{crop}, int64_t{crop}}) {
    header.add_shape(dim);
  }
  for (int i = 0; i < batch_size; ++i) {
    header.add_labels(i % 3 == 0 ? -1 : i);
    auto* info = header.add_samples();
    info->set_key("dir/key" + std::to_string(i));
    info->set_shard(i % 2);
    info->set_index_in_shard(i);
    info->set_valid(i % 3 != 0);
    info->set_substituted(i == 1);
  }
  for (size_t i = 0; i < batch->image_bytes(); ++i) {
    batch->images()[i] = static_cast<uint8_t>((i * 131) >> 3);
  }
  return batch;
}

TEST(BatchEncodingTest, ParsesAsABatchAndDoesNotCopyThePixels) {
  for (int crop : {1, 7, 64, 224}) {  // image lengths with 1- to 3-byte varints
    SCOPED_TRACE(crop);
    std::atomic<int64_t> gauge{0};
    auto batch = MakeBatch(5, crop, &gauge);
    EXPECT_EQ(gauge.load(), 5 * 3 * crop * crop);
    grpc::ByteBuffer buffer;
    const int64_t size = EncodeBatch(batch, &buffer);
    EXPECT_EQ(static_cast<size_t>(size), buffer.Length());

    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(slices[1].begin(), batch->images()) << "the pixels were copied";
    EXPECT_EQ(slices[1].size(), batch->image_bytes());

    std::string wire;
    for (const grpc::Slice& slice : slices) {
      wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    shardcast::v1::Batch parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    shardcast::v1::Batch expected = batch->header();
    expected.set_images(
        std::string(reinterpret_cast<const char*>(batch->images()), batch->image_bytes()));
    EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
    EXPECT_EQ(static_cast<size_t>(size), expected.ByteSizeLong());
  }
}

TEST(BatchEncodingTest, ABatchWithoutImagesIsItsHeaderWithItsFields) {
  std::atomic<int64_t> gauge{0};
  std::shared_ptr<AssembledBatch> batch = *AssembledBatch::Create(3, /*crop=*/0, &gauge);
  EXPECT_EQ(batch->images(), nullptr);
  EXPECT_EQ(gauge.load(), 0);
  for (int i = 0; i < 3; ++i) {
    batch->header().add_labels(-1);
    auto* field = batch->header().add_samples()->add_fields();
    field->set_present(true);
    field->set_ext("txt");
    field->set_data(std::string(1000 + i, static_cast<char>('a' + i)));
  }
  grpc::ByteBuffer buffer;
  const int64_t size = EncodeBatch(batch, &buffer, /*server_draining=*/true);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 1u);
  shardcast::v1::Batch parsed;
  ASSERT_TRUE(parsed.ParseFromArray(slices[0].begin(), static_cast<int>(slices[0].size())));
  EXPECT_EQ(static_cast<size_t>(size), slices[0].size());
  EXPECT_TRUE(parsed.images().empty());
  EXPECT_TRUE(parsed.server_draining());
  ASSERT_EQ(parsed.samples_size(), 3);
  EXPECT_EQ(parsed.samples(2).fields(0).data(), std::string(1002, 'c'));
}

TEST(BatchEncodingTest, TheBufferLivesWhileTheMessageDoes) {
  std::atomic<int64_t> gauge{0};
  auto batch = MakeBatch(2, 8, &gauge);
  std::weak_ptr<AssembledBatch> weak = batch;
  auto message = std::make_unique<grpc::ByteBuffer>();
  EncodeBatch(std::move(batch), message.get());
  EXPECT_FALSE(weak.expired());  // held by the slice alone
  EXPECT_GT(gauge.load(), 0);
  grpc::ByteBuffer copy(*message);  // gRPC copies are references
  message.reset();
  EXPECT_FALSE(weak.expired());
  copy.Clear();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(gauge.load(), 0);
}

}  // namespace
}  // namespace shardcast::server

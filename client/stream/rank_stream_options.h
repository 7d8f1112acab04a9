// What a RankStream is made of and hands out, below both of its parts: its options
// (the job and the stream's settings) and a received batch. RankStream (rank_stream.h)
// and one StreamBatches call of its prefetch loop (stream_attempt.h) both include this,
// so neither includes the other's header.
#ifndef SHARDCAST_CLIENT_STREAM_RANK_STREAM_OPTIONS_H_
#define SHARDCAST_CLIENT_STREAM_RANK_STREAM_OPTIONS_H_

#include <memory>

#include "client/base/stream_settings.h"
#include "client/rpc/wire_batch.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

struct RankStreamOptions : StreamSettings {
  // job_id, rank, world_size, batch size, split, ... Its `delivery` is set from `decode`
  // (server: IMAGE_DELIVERY_SERVER, cpu and none: IMAGE_DELIVERY_ENCODED) for a job
  // with images.
  shardcast::v1::RegisterRequest job;
};

// A received batch that passed the checks: (epoch, index) in sequence, shape equal
// to the registration's ([batch_size, 3, C, C]), B labels, B samples and B*3*C*C image bytes (kept
// in the slices they arrived in: wire_batch.h); for a job without images
// (RegisteredWithImages false) no shape and no image bytes. Each valid sample carries
// the registration's fields in order, header().samples(i).fields(j) (present, ext, the
// member's bytes as stored); padding carries none.
using ReceivedBatch = std::shared_ptr<const WireBatch>;

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_STREAM_RANK_STREAM_OPTIONS_H_

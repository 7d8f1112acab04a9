// EncodedBatchDecoder: a batch received in encoded delivery (each sample's image as
// stored, SampleInfo.encoded, with the crop the server planned for it) turned into the
// B x 3 x C x C uint8 pixels server delivery would have sent, byte for byte, with the
// project's own decode (DecodeWithCrop), on threads this object owns. RankStream runs it
// on its prefetch thread for StreamSettings::decode == kCpu; the caller's thread (and
// Python's GIL) only waits for it.
#ifndef SHARDCAST_CLIENT_DECODE_ENCODED_BATCH_DECODER_H_
#define SHARDCAST_CLIENT_DECODE_ENCODED_BATCH_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/base/stream_settings.h"
#include "common/plan/job_config.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

struct EncodedBatchDecoderOptions {
  TransformMode mode = TransformMode::kCenter;  // the registration's transform mode
  bool dct_scaling = false;                     // RegisterResponse.transform.dct_scaling
  int threads = 0;  // 0: min(hardware threads, kMaxDefaultDecodeThreads)
  // Decode buffers of all threads at once, from each image's header before its
  // buffers are allocated; an image whose buffers alone are over it is substituted.
  int64_t max_decode_memory_bytes = kDefaultClientDecodeMemoryBytes;
};

// A sample this client could not decode: written as the substitute and marked.
struct DecodeFailure {
  int sample = 0;
  std::string notice;  // shard, key and the decode's error, for a log line
};

class EncodedBatchDecoder {
 public:
  // REQUIRES: options.threads >= 0, options.max_decode_memory_bytes > 0 (checked by
  // CheckStreamSettings for a stream's).
  explicit EncodedBatchDecoder(const EncodedBatchDecoderOptions& options);
  ~EncodedBatchDecoder();  // joins the threads
  EncodedBatchDecoder(const EncodedBatchDecoder&) = delete;
  EncodedBatchDecoder& operator=(const EncodedBatchDecoder&) = delete;

  // Writes the pixels of `batch` (checked by CheckBatch: shape [B,3,C,C], an `encoded`
  // per valid sample) to `out`, B*3*C*C bytes: padding zeros, a sample the server
  // substituted (empty data) and one whose decode fails here every byte 128 (server
  // delivery's substitute). A failed sample is marked substituted in `batch`, counted
  // (substituted()) and returned. One batch at a time; callers on several threads wait
  // their turn.
  std::vector<DecodeFailure> Decode(shardcast::v1::Batch* batch, uint8_t* out);

  int threads() const;
  // Samples substituted here since construction (not counting the server's).
  int64_t substituted() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_DECODE_ENCODED_BATCH_DECODER_H_

// Encoded delivery's per-sample work: an image member turned into the wire's
// EncodedImage (the bytes the client decodes and the crop the server's transform would
// make of them), or the reason the sample is substituted instead. Nothing is decoded:
// the header alone decides, so the server's CPU per image is a read and a header parse.
#ifndef SHARDCAST_SERVER_ASSEMBLY_ENCODED_IMAGE_H_
#define SHARDCAST_SERVER_ASSEMBLY_ENCODED_IMAGE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/memory/memory_budget.h"
#include "common/plan/job_config.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// Fills `*out` with `member` (the image as stored, moved in) and the crop `spec` makes
// of it with `augment_seed` (PlanEncodedSample: the same draw as DecodeAndTransform's).
// An error means the sample is substituted, for exactly the reasons server delivery
// substitutes an image before decoding it: PlanEncodedSample's (an unreadable header,
// a size over the pixel limit, a geometry the transform cannot take) and, with a
// `budget`, the RESOURCE_EXHAUSTED of an image whose decode buffers alone are over its
// limit (counted as the budget counts a refusal; nothing is acquired, since nothing
// is decoded here). A header that reads over data that does not decode is no error:
// the client's decode fails and substitutes the same bytes. `*out` is untouched on error.
//
// With `lossless_cut`, a random crop's JPEG is sent cut losslessly to the part its crop
// reads (jpeg_lossless_cut.h: the client's decode makes the same bytes), when the cut is
// smaller; the cut's coefficient memory is held in `budget` while it is made. A JPEG the
// cut refuses, or that the budget cannot hold, is sent as stored: the cut only saves
// bytes, it never decides a sample.
absl::Status EncodeImage(std::string member, const TransformSpec& spec, uint64_t augment_seed,
                         MemoryBudget* budget, bool lossless_cut, shardcast::v1::EncodedImage* out);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_ENCODED_IMAGE_H_

// shardcast._native's received batches: a batch's pixels and labels as Python buffers over
// the memory they were received in (torch.frombuffer wraps them without a copy), its
// samples and fields as Python objects, its encoded images (decode "none") as views.
#ifndef SHARDCAST_PYTHON_NATIVE_BATCH_BINDINGS_H_
#define SHARDCAST_PYTHON_NATIVE_BATCH_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "client/rpc/wire_batch.h"
#include "client/stream/rank_stream.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

// The names under which a job's fields are handed out (FieldSpec::Name(): "txt",
// "jpg;png"), in the registration's order.
using FieldNames = std::shared_ptr<const std::vector<std::string>>;

// One received batch that passed RankStream's checks. Its pixels are one block (the
// receiving thread joined them: join_images), unless next_into copied them to the
// caller's memory (`pixels_copied`) or the job has no images (no pixels at all).
struct NativeBatch {
  ReceivedBatch wire;
  FieldNames field_names;
  bool pixels_copied = false;
  // SampleInfo.dataset of a valid sample that names none: the dataset of a job of one
  // (RegisterResponse.dataset); a mixed job's samples name their own.
  std::shared_ptr<const std::string> dataset;
};

// The registration's field names. RankStream checked that its fields parse.
FieldNames NamesOfFields(const shardcast::v1::RegisterResponse& registration);

// Adds _native.Buffer, _native.Batch and _native.EncodedImage to `m`.
void BindBatches(pybind11::module_& m);

}  // namespace shardcast::client

#endif  // SHARDCAST_PYTHON_NATIVE_BATCH_BINDINGS_H_

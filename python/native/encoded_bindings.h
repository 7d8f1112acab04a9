// shardcast._native's stateless functions of encoded delivery (proto EncodedImage): a
// sample's decode on the CPU as the server makes it, and the pieces the Python GPU
// decode (shardcast/gpu_decode.py) is built and tested on.
#ifndef SHARDCAST_PYTHON_NATIVE_ENCODED_BINDINGS_H_
#define SHARDCAST_PYTHON_NATIVE_ENCODED_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace shardcast::client {

// Adds decode_encoded, image_info, plan_encoded_sample, decode_image and apply_crop to `m`.
void BindEncodedImageFunctions(pybind11::module_& m);

}  // namespace shardcast::client

#endif  // SHARDCAST_PYTHON_NATIVE_ENCODED_BINDINGS_H_

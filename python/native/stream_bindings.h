// shardcast._native.Stream: one rank's stream for Python (stream_bindings.cc): register
// with retry, prefetch, checks, reconnect, every wait without the GIL and interruptible.
#ifndef SHARDCAST_PYTHON_NATIVE_STREAM_BINDINGS_H_
#define SHARDCAST_PYTHON_NATIVE_STREAM_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace shardcast::client {

// Adds _native.Stream to `m`.
void BindStream(pybind11::module_& m);

}  // namespace shardcast::client

#endif  // SHARDCAST_PYTHON_NATIVE_STREAM_BINDINGS_H_

// shardcast._native's description of a stream's options: StreamOptions (the C++
// StreamSettings), the channel's security, the field specs' parser and the ranges every
// option is checked against (the C++ constants the server and the C++ clients enforce),
// which shardcast/options.py, the Loader's one table of its arguments, reads.
#ifndef SHARDCAST_PYTHON_NATIVE_OPTION_BINDINGS_H_
#define SHARDCAST_PYTHON_NATIVE_OPTION_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace shardcast::client {

// Adds StreamOptions, Security, client_security, check_field_specs and option_limits
// to `m`.
void BindStreamOptions(pybind11::module_& m);

}  // namespace shardcast::client

#endif  // SHARDCAST_PYTHON_NATIVE_OPTION_BINDINGS_H_

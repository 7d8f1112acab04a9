// shardcast._native's options of a stream (see option_bindings.h).
#include "python/native/option_bindings.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "client/base/stream_settings.h"
#include "client/reconnect/server_list.h"
#include "client/rpc/client_security.h"
#include "common/plan/field_spec.h"
#include "common/plan/job_config.h"
#include "common/plan/mixture_plan.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

// The one name of each ClientDecode in Python (StreamOptions.decode). A switch without a
// default: the compiler names the case a new enumerator forgot.
const char* DecodeName(ClientDecode decode) {
  switch (decode) {
    case ClientDecode::kServer:
      return "server";
    case ClientDecode::kCpu:
      return "cpu";
    case ClientDecode::kNone:
      return "none";
  }
  return "";  // not reached: the switch names every enumerator
}

// The range of one option the Loader takes (lowest and highest accepted value; None,
// Python's "the default", is not in it).
struct OptionRange {
  const char* name;
  int64_t lowest;
  uint64_t highest;
};

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Every integer option's range, from the constants that the server's Validate
// (common/plan/job_config.h) and the C++ client's CheckStreamSettings
// (client/checks/request_checks.cc) enforce, and the wire's field types: one table,
// so a Python caller is refused where a C++ one would be.
constexpr OptionRange kOptionRanges[] = {
    {"batch_size", 1, kMaxBatchSize},
    {"world_size", 1, kMaxWorldSize},
    {"rank", 0, kMaxWorldSize - 1},
    {"workers", 1, kMaxWorkers},
    {"seed", 0, std::numeric_limits<uint64_t>::max()},  // uint64 on the wire
    {"shuffle_buffer", 0, kMaxShuffleBuffer},
    {"block_size", 0, kInt32Max},
    {"resize", 1, kMaxResize},
    {"crop", 1, kMaxCrop},
    {"job_id_length", 1, kMaxJobIdLength},
    {"fields", 0, kMaxFields},
    {"prefetch", 1, kInt32Max},  // StreamSettings::prefetch is an int, >= 1
    // 0 is the C++ client's "the default", which Python spells None.
    {"decode_threads", 1, kMaxDecodeThreads},
    // A mixture (common/plan/mixture_plan.h): its epoch length, its datasets, its steps.
    {"samples_per_epoch", 1, kMaxSamplesPerEpoch},
    {"mix_datasets", 1, kMaxMixtureDatasets},
    {"mix_step", 0, kMaxMixturePosition - 1},
};

py::dict OptionLimits() {
  py::dict limits;
  for (const OptionRange& range : kOptionRanges) {
    limits[range.name] = py::make_tuple(range.lowest, range.highest);
  }
  return limits;
}

void BindStreamSettings(py::module_& m) {
  // A rank's stream settings (stream_settings.h; its defaults), named as the Loader's
  // keywords.
  py::class_<StreamSettings>(m, "StreamOptions")
      .def(py::init<>())
      // An address that cannot be one is a ValueError here, before anything connects.
      .def_property(
          "server", [](const StreamSettings& settings) { return settings.server; },
          [](StreamSettings& settings, const std::string& server) {
            if (absl::Status valid = CheckServerList(server); !valid.ok()) {
              throw py::value_error(std::string(valid.message()));
            }
            settings.server = server;
          })
      .def_readwrite("prefetch", &StreamSettings::prefetch)
      .def_readwrite("reconnect_initial", &StreamSettings::reconnect_initial_seconds)
      .def_readwrite("reconnect_max", &StreamSettings::reconnect_max_seconds)
      .def_readwrite("reconnect_deadline", &StreamSettings::reconnect_deadline_seconds)
      .def_readwrite("handshake_refusal", &StreamSettings::handshake_refusal_seconds)
      .def_readwrite("stream_timeout", &StreamSettings::stream_timeout_seconds)
      .def_readwrite("join_images", &StreamSettings::join_images)
      // ClientDecode by its C++ name: "server" (pixels from the server), "cpu" (encoded
      // delivery decoded by this client's threads, without the GIL: the same pixels) or
      // "none" (encoded delivery handed over undecoded: each sample's `encoded`, no
      // pixels). The native client names the wire's delivery from it (rank_stream.cc).
      .def_property(
          "decode", [](const StreamSettings& settings) { return DecodeName(settings.decode); },
          [](StreamSettings& settings, const std::string& name) {
            for (ClientDecode decode :
                 {ClientDecode::kServer, ClientDecode::kCpu, ClientDecode::kNone}) {
              if (name == DecodeName(decode)) {
                settings.decode = decode;
                return;
              }
            }
            throw py::value_error(absl::StrFormat("decode: '%s' is not one of server, cpu, none",
                                                  absl::CHexEscape(name)));
          })
      .def_readwrite("decode_threads", &StreamSettings::decode_threads)
      .def_readwrite("max_decode_memory", &StreamSettings::max_decode_memory_bytes);
}

void BindSecurity(py::module_& m) {
  // The channel's credentials and token, opaque: built by client_security().
  // NOLINTNEXTLINE(bugprone-unused-raii): the constructor registers the class with `m`
  py::class_<ClientSecurity>(m, "Security");
  m.def(
      "client_security",
      [](bool tls, const std::optional<std::string>& tls_ca,
         const std::optional<std::string>& tls_cert, const std::optional<std::string>& tls_key,
         std::optional<std::string> token) {
        ClientSecurityValues values;
        values.tls = tls;
        values.tls_ca = tls_ca.value_or("");
        values.tls_cert = tls_cert.value_or("");
        values.tls_key = tls_key.value_or("");
        values.token = std::move(token);
        absl::StatusOr<ClientSecurity> security = LoadClientSecurity(values, KeywordNames());
        if (!security.ok()) throw py::value_error(std::string(security.status().message()));
        return *std::move(security);
      },
      py::arg("tls") = false, py::arg("tls_ca") = py::none(), py::arg("tls_cert") = py::none(),
      py::arg("tls_key") = py::none(), py::arg("token") = py::none(),
      "the C++ clients' rule (client_security.h): TLS when tls, tls_ca or tls_cert is given, a "
      "client certificate with tls_cert and tls_key (both or neither), the token given or else "
      "$SHARDCAST_TOKEN's (one token or empty); ValueError naming the keyword and the file");
}

}  // namespace

void BindStreamOptions(py::module_& m) {
  BindStreamSettings(m);
  BindSecurity(m);
  // The server's parser (field_spec.h), so that a spec no member name can match is a
  // ValueError when the Loader is made, not a refusal after it connected.
  m.def(
      "check_field_specs",
      [](const std::vector<std::string>& specs) {
        if (absl::StatusOr<std::vector<shardcast::FieldSpec>> parsed =
                shardcast::ParseFieldSpecs(specs);
            !parsed.ok()) {
          throw py::value_error(std::string(parsed.status().message()));
        }
      },
      "ValueError naming the spec and what is wrong with it (field_spec.h's rules)");
  m.def("option_limits", &OptionLimits,
        "{option: (lowest, highest)}: the range of each integer option the Loader takes, from "
        "the constants the server and the C++ clients enforce");
}

}  // namespace shardcast::client

// Channel set-up and status conversion for every client (see channel.h).
#include "client/protocol/channel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardcast::client {

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  const int initial_ms = std::max<int>(
      1, static_cast<int>(absl::ToInt64Milliseconds(options.reconnect_backoff_initial)));
  const int max_ms = std::max<int>(
      initial_ms, static_cast<int>(absl::ToInt64Milliseconds(options.reconnect_backoff_max)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  if (options.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  }
  if (options.stream_window_bytes > 0) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.stream_window_bytes);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(options.target, credentials, args);
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

std::string DescribeRpcError(const grpc::Status& status) {
  std::string out = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  if (!status.error_message().empty()) absl::StrAppend(&out, ": ", status.error_message());
  return out;
}

}  // namespace shardcast::client

// StreamSettings: how one rank's stream reaches its server and when it gives up, the
// part of a stream's options that is not the job: server, credentials, prefetch,
// reconnect and progress deadlines. Plain C++, shared by RankStream (rank_stream.h, the
// wire's types) and RankFeed (rank_feed.h, plain types only).
#ifndef SHARDCAST_CLIENT_BASE_STREAM_SETTINGS_H_
#define SHARDCAST_CLIENT_BASE_STREAM_SETTINGS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/util/clock.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace shardcast::client {

// Where a stream's images are decoded (a job with images; ignored for one without).
enum class ClientDecode {
  kServer,  // delivery server: the server sends pixels (the default)
  kCpu,     // delivery encoded, decoded here into the batch's pixels (same bytes)
  kNone,    // delivery encoded, handed over undecoded (SampleInfo.encoded), no pixels
};

// The decode-memory limit a client applies when told none: the server's
// --max-decode-memory default on a machine of 32 GiB or more (an eighth of its memory,
// at most 4 GiB). A header that claims 65500 x 65500 pixels is refused from the header,
// before any buffer is allocated.
inline constexpr int64_t kDefaultClientDecodeMemoryBytes = int64_t{4} << 30;
// Decode threads when told 0: the hardware's threads, at most this many.
inline constexpr int kMaxDefaultDecodeThreads = 8;
// The most decode threads a stream may be asked for (each is a thread of the process).
inline constexpr int kMaxDecodeThreads = 1024;

struct StreamSettings {
  std::string server;  // gRPC target, "host:port"
  // nullptr = plaintext. Passed to MakeChannel (client/rpc/channel.h), as is the
  // bearer token (empty = none); client_security.h makes both from the flags.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string bearer_token;
  int prefetch = 4;  // batches buffered ahead of the consumer (>= 1)
  // Reconnect with exponential backoff (initial..max) for at most this long before
  // giving up on a dead server.
  double reconnect_initial_seconds = 0.1;
  double reconnect_max_seconds = 2.0;
  double reconnect_deadline_seconds = 120.0;
  // A peer that keeps accepting the connection and closing it during the handshake
  // (ClosedDuringConnect: a TLS server this client speaks plaintext to, or one that
  // requires a client certificate this client lacks) for this long is reported as such
  // instead of being retried until the reconnect deadline. Not immediately, because a
  // proxy in front of a server that is still starting (docker's port publishing) looks
  // the same for a few seconds.
  double handshake_refusal_seconds = 10.0;
  // Progress deadline, 0 = off. gRPC's sync Read() waits forever on a server that
  // keeps the connection open but sends nothing (stopped, deadlocked, swapping), so a
  // watchdog cancels a stream that has delivered no batch for this long, counted from
  // the request or from when the next message was asked for (time the consumer takes
  // before making room in the prefetch queue never counts). The rank then reconnects
  // as after a broken stream; if that brings no batch within another such period
  // either, Next() fails with DEADLINE_EXCEEDED naming server, job, rank, epoch, batch
  // and the timeout. Generous by default: an epoch's first batch waits for decoding.
  double stream_timeout_seconds = 120.0;
  // The prefetch thread joins each batch's pixels into one block (WireBatch::JoinImages),
  // so a consumer that needs them contiguous (the Python Loader's tensors) wraps them
  // without a copy of its own, and the copy overlaps the consumer's work. Off for
  // consumers that copy anyway (into pinned memory, or normalizing into floats).
  bool join_images = false;
  // > 0: a fixed HTTP/2 window (ChannelOptions::stream_window_bytes), so the transport
  // holds at most this much beyond the prefetch queue. 0 = gRPC's BDP-grown window,
  // which on loopback takes megabytes: a whole short epoch can sit in it.
  int stream_window_bytes = 0;
  // kCpu: decoded on `decode_threads` threads of the stream's own (0: the hardware's, at
  // most kMaxDefaultDecodeThreads), on the prefetch thread's behalf, so decoding overlaps
  // the consumer. Their decode buffers together stay within `max_decode_memory_bytes`,
  // admitted from each image's header; an image over it alone is substituted (as the
  // server does), counted and told to `on_decode_failure`.
  ClientDecode decode = ClientDecode::kServer;
  int decode_threads = 0;
  int64_t max_decode_memory_bytes = kDefaultClientDecodeMemoryBytes;
  // Told, on the prefetch thread, of each sample this client could not decode (shard,
  // key and the error): it is the substitute (every byte 128) and marked substituted.
  // Null: written to stderr, so that a substitution is never silent.
  std::function<void(const std::string& notice)> on_decode_failure;
  // What the reconnect backoff, its deadline, the handshake-refusal window and the
  // stream timeout's watchdog read and wait on (not owned; outlives the stream). Tests
  // pass a clock they move (tests/support/fake_clock.h).
  const util::Clock* clock = util::Clock::Real();
  // Told once, on the registering thread, when the first attempt to register reaches no
  // server, with the address, the error and how long registering goes on trying: a
  // client shows it as a log line, so that a wrong address or a server not started yet
  // is not silent until the reconnect deadline. Null: nothing is said.
  std::function<void(const std::string& notice)> on_waiting;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_BASE_STREAM_SETTINGS_H_

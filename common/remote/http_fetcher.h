// HTTP(S) range reads for shards in object storage, on libcurl: a bounded pool of
// kept-alive connections, S3 SigV4 signing (libcurl's CURLOPT_AWS_SIGV4), retries with
// backoff that resume a cut body from the last byte received, Retry-After, a deadline
// per request, and the object's identity (ETag, size) checked on every response.
#ifndef SHARDCAST_COMMON_REMOTE_HTTP_FETCHER_H_
#define SHARDCAST_COMMON_REMOTE_HTTP_FETCHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/remote/dataset_url.h"
#include "common/remote/fetch_options.h"
#include "common/remote/s3_settings.h"
#include "common/util/clock.h"

namespace shardcast::remote {

// How a request is signed: nullopt = not at all (HTTP, a public bucket).
struct SigV4 {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // x-amz-security-token when non-empty
  std::string region;
};
std::optional<SigV4> SigV4For(const S3Settings& settings);  // nullopt without a key

// One object's bytes: exactly [offset, offset + length), or, as a separate kind of
// request (to_end), every byte from `offset` to the object's end. A length of 0 is 0
// bytes (answered without a request), never "everything".
struct RangeRequest {
  std::string url;
  std::optional<SigV4> sign;
  uint64_t offset = 0;
  uint64_t length = 0;  // the bytes wanted; 0 with to_end
  // The identity pinned when the dataset was indexed; empty / 0 = unchecked. A
  // non-empty ETag is sent as If-Match (S3 answers 412 when it changed) and compared
  // with the response's ETag (for servers that ignore If-Match); a size is compared
  // with the total of the response's Content-Range (or its Content-Length for a
  // whole-object read), and bounds the body: a byte past it is a store error.
  std::string etag;
  uint64_t size = 0;
  // From `offset` to the object's end (a whole object: an index file, a shard copied
  // whole) instead of `length` bytes. Bounded by the pinned size, else by the size the
  // response announces; a body announcing none is bounded only by the caller's sink.
  bool to_end = false;
  // A 404 is an answer, not a store failing (a file looked for where it may not be,
  // the dataset index file): NOT_FOUND unmarked and not counted in failures.
  bool may_be_absent = false;
  // Ends the request early once cancelled (null: nothing does): at once when it waits
  // between attempts, at libcurl's next progress call (about a second when no byte
  // comes) when a transfer is in flight. The request then fails with CANCELLED,
  // unmarked (no fault of the store) and not counted in failures. Not owned; must
  // outlive the request.
  const util::CancelToken* cancel = nullptr;
};

// What HEAD (or the first response of a read) says of an object.
struct ObjectHead {
  uint64_t size = 0;
  std::string etag;  // with its quotes, as sent; empty when the server sends none
};

// Counters for status and /metrics; monotonic.
struct FetchCounters {
  std::atomic<int64_t> requests{0};  // HTTP requests sent (retries included)
  std::atomic<int64_t> bytes{0};     // body bytes received
  std::atomic<int64_t> retries{0};   // attempts after the first of a request
  // Requests that returned an error (a 404 included, but for a request that said the
  // object may be absent).
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> connections_in_use{0};  // gauge
  // Successful requests and the time they took, first attempt to last byte (status
  // and /metrics give both: a mean latency, and its rate in Prometheus).
  std::atomic<int64_t> requests_ok{0};
  std::atomic<int64_t> latency_sum_us{0};
};

// Thread-safe: any number of threads call it at once; at most max_connections of them
// are on the network, the rest wait.
class HttpFetcher {
 public:
  // Initializes libcurl once per process. INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<HttpFetcher>> Create(const FetchOptions& options);
  virtual ~HttpFetcher() = default;

  // The bytes of the range (exactly `length` of them, or to the object's end for
  // to_end). Every error is the store's, never the data's, and names the URL:
  // - FAILED_PRECONDITION marked as ShardChangedError (common/shards/shard_reader.h)
  //   when the object is not the one pinned: 412, another ETag, another size;
  // - else marked as a HostIoError (common/shards/shard_reader.h: the store's fault,
  //   which the serve path retries and then fails the stream with; never a substitute):
  //   NOT_FOUND (404), PERMISSION_DENIED (401/403, with S3's error code and message
  //   from the XML body when there is one), INVALID_ARGUMENT (other 4xx, 416), INTERNAL
  //   (a malformed answer: a 206 for other bytes or without a readable Content-Range, a
  //   body longer than the object), none of them retried here; UNAVAILABLE when the
  //   deadline passed while retrying 5xx, 408, 429, connection failures, cut bodies and
  //   trickles, saying how many attempts and the last error.
  //   Only a 404 of a request that set may_be_absent is NOT_FOUND unmarked.
  // A retry after a body was cut asks for the rest only (Range from the last byte
  // received) with If-Match on the ETag seen, so the bytes returned are one version.
  // The deadline (FetchOptions::request_deadline) bounds the whole request.
  virtual absl::StatusOr<std::string> Get(const RangeRequest& request) = 0;

  // Like Get, but hands the body to `sink` in order as it arrives, never a byte
  // twice (retries resume). For whole shards (indexing without an index file,
  // .tar.gz shards into the disk cache): memory stays one buffer, whatever the
  // object's size. An error from `sink` ends the read with that error, as it is.
  // The deadline bounds progress, not the whole read: it fails only when no byte came
  // for request_deadline (retries included), so a big object on a slow but steady link
  // is read whole, however long that takes.
  virtual absl::Status GetStreaming(const RangeRequest& request,
                                    const std::function<absl::Status(absl::string_view)>& sink) = 0;

  // HEAD: size and ETag. Errors as Get.
  virtual absl::StatusOr<ObjectHead> Head(const std::string& url,
                                          const std::optional<SigV4>& sign) = 0;

  // HTTP Basic credentials (a dataset URL's userinfo, which ParseDatasetUrl takes out
  // of the URLs) for every unsigned request whose URL starts with `url_prefix` (the
  // dataset's base): sent with CURLOPT_USERNAME/PASSWORD, so no URL carries them;
  // never to another host a redirect leads to. The same prefix again replaces them.
  virtual void AddCredentials(const std::string& url_prefix, const UrlCredentials& credentials) = 0;

  virtual const FetchCounters& counters() const = 0;
};

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_HTTP_FETCHER_H_

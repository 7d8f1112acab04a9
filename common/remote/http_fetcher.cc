// HttpFetcher on libcurl's easy interface: one easy handle per connection slot, each
// keeping its connections alive between requests, lent to one request at a time.
#include "common/remote/http_fetcher.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/remote/http_retry.h"
#include "common/remote/s3_xml.h"
#include "common/shards/shard_reader.h"
#include "common/util/retry_policy.h"

namespace shardcast::remote {

std::optional<SigV4> SigV4For(const S3Settings& settings) {
  if (settings.access_key_id.empty()) return std::nullopt;
  return SigV4{settings.access_key_id, settings.secret_access_key, settings.session_token,
               settings.region};
}

namespace {

using Sink = std::function<absl::Status(absl::string_view)>;

// An error body is only read for its message: S3's are a few hundred bytes.
constexpr size_t kMaxErrorBody = 64 * 1024;

// curl_global_init is not thread-safe and must run once before any handle exists.
CURLcode InitCurlOnce() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  return result;
}

// The easy handles, at most `max` of them, each lent to one request at a time. A
// handle keeps its connections (and DNS and TLS session caches) between requests,
// which is what makes them kept-alive connections.
class HandlePool {
 public:
  HandlePool(int max, FetchCounters& counters) : max_(max), counters_(counters) {}
  ~HandlePool() {
    for (CURL* handle : free_) curl_easy_cleanup(handle);
  }

  // A handle, waiting for one to be returned when all `max` are lent; nullptr when
  // `deadline` passes first, `cancel` (null: nothing) is cancelled first, or libcurl
  // cannot make one.
  CURL* Take(absl::Time deadline, const util::CancelToken* cancel) {
    absl::MutexLock lock(&mu_);
    const auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !free_.empty() || created_ < max_;
    };
    // Like libcurl's timeouts, this wait is on real time. A cancel does not signal mu_:
    // it is seen at the next poll.
    while (true) {
      const absl::Time until = cancel == nullptr
                                   ? deadline
                                   : std::min(deadline, absl::Now() + util::CancelToken::kFlagPoll);
      if (mu_.AwaitWithDeadline(absl::Condition(&available), until)) break;
      if (until == deadline || cancel->cancelled()) return nullptr;
    }
    CURL* handle = nullptr;
    if (!free_.empty()) {
      handle = free_.back();
      free_.pop_back();
    } else {
      handle = curl_easy_init();
      if (handle == nullptr) return nullptr;
      ++created_;
    }
    counters_.connections_in_use.fetch_add(1);
    return handle;
  }

  void Return(CURL* handle) {
    absl::MutexLock lock(&mu_);
    counters_.connections_in_use.fetch_sub(1);
    free_.push_back(handle);
  }

 private:
  const int max_;
  FetchCounters& counters_;
  absl::Mutex mu_;
  std::vector<CURL*> free_ ABSL_GUARDED_BY(mu_);
  int created_ ABSL_GUARDED_BY(mu_) = 0;
};

// A handle taken from the pool for one attempt, returned when it goes out of scope.
class Lease {
 public:
  Lease(HandlePool& pool, absl::Time deadline, const util::CancelToken* cancel)
      : pool_(pool), handle_(pool.Take(deadline, cancel)) {}
  ~Lease() {
    if (handle_ != nullptr) pool_.Return(handle_);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  CURL* get() const { return handle_; }

 private:
  HandlePool& pool_;
  CURL* handle_;
};

// "bytes FIRST-LAST/TOTAL" (TOTAL may be '*').
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;
  std::optional<uint64_t> total;
};

std::optional<ContentRange> ParseContentRange(absl::string_view value) {
  if (!absl::ConsumePrefix(&value, "bytes ")) return std::nullopt;
  const std::vector<absl::string_view> range_total = absl::StrSplit(value, '/');
  if (range_total.size() != 2) return std::nullopt;
  const std::vector<absl::string_view> first_last = absl::StrSplit(range_total[0], '-');
  ContentRange range;
  if (first_last.size() != 2 || !absl::SimpleAtoi(first_last[0], &range.first) ||
      !absl::SimpleAtoi(first_last[1], &range.last) || range.last < range.first) {
    return std::nullopt;
  }
  if (range_total[1] != "*") {
    uint64_t total = 0;
    if (!absl::SimpleAtoi(range_total[1], &total)) return std::nullopt;
    range.total = total;
  }
  return range;
}

// ETags compared as the bytes they name: a weak W/"x" and a strong "x" name the same.
absl::string_view EtagValue(absl::string_view etag) {
  absl::ConsumePrefix(&etag, "W/");
  return etag;
}

// What the headers of the response being received say (the last response: each status
// line, of a redirect or a 100 Continue, starts them afresh).
struct ResponseHeaders {
  long status = 0;
  std::string reason;
  std::string etag;
  std::optional<uint64_t> content_length;
  std::optional<ContentRange> content_range;
  std::string content_range_text;
  std::optional<absl::Duration> retry_after;
};

// One request (GET or HEAD) from the first attempt to the last: what is still wanted,
// the identity the bytes must have, and the state of the attempt in flight.
struct Call {
  // --- The request.
  const char* method = "GET";
  std::string url;
  const std::optional<SigV4>* sign = nullptr;
  bool head = false;
  const Sink* sink = nullptr;
  bool may_be_absent = false;                 // a 404 is an answer (RangeRequest::may_be_absent)
  const util::CancelToken* cancel = nullptr;  // RangeRequest::cancel
  const util::Clock* clock = nullptr;         // FetchOptions::clock
  // The deadline moves to `window` after the last byte received (GetStreaming), instead
  // of staying `window` after the first attempt (Get, HEAD).
  bool deadline_follows_progress = false;
  absl::Duration window;
  absl::Time deadline;

  // --- Across attempts.
  uint64_t next_offset = 0;      // of the next byte wanted
  bool to_end = true;            // wanted up to the object's end...
  uint64_t remaining = 0;        // ...or this many more bytes
  std::string etag;              // pinned, else the first one seen
  std::optional<uint64_t> size;  // pinned, else the first one seen

  // --- The attempt in flight.
  ResponseHeaders headers;
  bool sent_range = false;
  bool checked = false;      // the response's identity was checked (at its first byte)
  uint64_t skip = 0;         // bytes of a 200 before the wanted offset (Range ignored)
  bool progress = false;     // bytes went to the sink
  bool done = false;         // every wanted byte arrived; the rest of the body is not
  absl::Status abort;        // why the write callback stopped the transfer
  bool sink_failed = false;  // `abort` is the sink's error, not the store's
  bool stalled = false;      // the progress callback stopped it: no byte before `deadline`
  bool cancelled = false;    // the progress callback stopped it: `cancel` was cancelled
  std::string error_body;
  char error_buffer[CURL_ERROR_SIZE] = {};

  bool Ranged() const { return next_offset > 0 || !to_end; }
  bool Cancelled() const { return cancel != nullptr && cancel->cancelled(); }

  // Every wanted byte went to the sink (known only once a response said the size).
  bool Complete() const {
    if (!checked) return false;
    return to_end ? size.has_value() && next_offset >= *size : remaining == 0;
  }

  void StartAttempt() {
    headers = ResponseHeaders();
    sent_range = Ranged();
    checked = false;
    skip = 0;
    progress = false;
    done = false;
    abort = absl::OkStatus();
    sink_failed = false;
    stalled = false;
    cancelled = false;
    error_body.clear();
    error_buffer[0] = '\0';
  }

  // Whether the response's bytes are those of the object pinned (or seen first), and
  // where the wanted ones start in its body. Run when the body starts, or at the end
  // for a response without one.
  absl::Status CheckIdentity() {
    checked = true;
    std::optional<uint64_t> total;
    if (headers.status == 206) {
      if (!headers.content_range.has_value()) {
        return absl::InternalError(
            absl::StrCat(url, ": a 206 response without a readable Content-Range (\"",
                         headers.content_range_text, "\")"));
      }
      if (headers.content_range->first != next_offset) {
        return absl::InternalError(absl::StrCat(url, ": asked for bytes from ", next_offset,
                                                ", got a 206 with Content-Range \"",
                                                headers.content_range_text, "\""));
      }
      total = headers.content_range->total;
    } else {
      // A whole body: a server that ignores Range sends everything from byte 0, so the
      // bytes before the wanted ones are skipped.
      total = headers.content_length;
      skip = next_offset;
    }
    if (!etag.empty() && !headers.etag.empty() && EtagValue(etag) != EtagValue(headers.etag)) {
      return ShardChangedError(url, absl::StrCat("ETag ", etag, " -> ", headers.etag));
    }
    if (size.has_value() && total.has_value() && *size != *total) {
      return ShardChangedError(url, absl::StrCat("size ", *size, " -> ", *total, " bytes"));
    }
    if (etag.empty()) etag = headers.etag;
    if (!size.has_value()) size = total;
    if (!to_end && size.has_value() && next_offset + remaining > *size) {
      return absl::InvalidArgumentError(
          absl::StrCat(url, ": bytes [", next_offset, ", ", next_offset + remaining,
                       ") are past the end of the ", *size, "-byte object"));
    }
    return absl::OkStatus();
  }

  // Takes `data` of a 2xx body; false stops the transfer (done, or `abort` set).
  bool TakeBody(absl::string_view data) {
    if (!checked) {
      abort = CheckIdentity();
      if (!abort.ok()) return false;
    }
    const uint64_t skipped = std::min<uint64_t>(skip, data.size());
    skip -= skipped;
    data.remove_prefix(skipped);
    if (!to_end) data = data.substr(0, remaining);
    if (to_end && size.has_value() && data.size() > *size - std::min(*size, next_offset)) {
      // A body without a length (or with a wrong one) that goes on past the object's
      // end: not the object's bytes, and no bound on memory if taken.
      abort = absl::InternalError(absl::StrCat(
          url, ": the body goes on past the end of the ", *size, "-byte object (",
          headers.content_length.has_value() ? "a wrong Content-Length" : "no Content-Length",
          "): not the object's bytes"));
      return false;
    }
    if (!data.empty()) {
      abort = (*sink)(data);
      if (!abort.ok()) {
        sink_failed = true;
        return false;
      }
      progress = true;
      // Progress is a wanted byte, never one received again: an attempt that only
      // repeats bytes (a server ignoring the Range of a resume) does not move it.
      if (deadline_follows_progress) deadline = clock->Now() + window;
      next_offset += data.size();
      if (!to_end) remaining -= data.size();
    }
    if (!to_end && remaining == 0) {
      done = true;  // a server that ignored the Range may send more: not wanted
      return false;
    }
    return true;
  }
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  Call& call = *static_cast<Call*>(user);
  const size_t bytes = size * count;
  absl::string_view line = absl::StripTrailingAsciiWhitespace(absl::string_view(data, bytes));
  if (absl::StartsWith(line, "HTTP/")) {
    call.headers = ResponseHeaders();
    // "HTTP/1.1 503 Service Unavailable": the reason phrase, for messages.
    const std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    if (parts.size() >= 2) {
      int status = 0;
      if (absl::SimpleAtoi(parts[1], &status)) call.headers.status = status;
    }
    if (parts.size() == 3) call.headers.reason = std::string(parts[2]);
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return bytes;
  const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "etag") {
    call.headers.etag = std::string(value);
  } else if (name == "content-length") {
    uint64_t length = 0;
    if (absl::SimpleAtoi(value, &length)) call.headers.content_length = length;
  } else if (name == "content-range") {
    call.headers.content_range_text = std::string(value);
    call.headers.content_range = ParseContentRange(value);
  } else if (name == "retry-after") {
    call.headers.retry_after = internal::ParseRetryAfter(value, call.clock->Now());
  }
  return bytes;
}

// For a call that can be cancelled, or whose deadline follows progress (it has no
// whole-transfer timeout): stops the transfer once cancelled, or once no byte came
// before the deadline. Returning non-zero ends it with CURLE_ABORTED_BY_CALLBACK.
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  Call& call = *static_cast<Call*>(user);
  if (call.Cancelled()) {
    call.cancelled = true;
    return 1;
  }
  if (!call.deadline_follows_progress || call.clock->Now() < call.deadline) return 0;
  call.stalled = true;
  return 1;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  Call& call = *static_cast<Call*>(user);
  const size_t bytes = size * count;
  if (call.headers.status >= 200 && call.headers.status < 300) {
    // Returning less than `bytes` makes curl stop with CURLE_WRITE_ERROR.
    return call.TakeBody(absl::string_view(data, bytes)) ? bytes : 0;
  }
  const size_t keep =
      std::min(bytes, kMaxErrorBody - std::min(kMaxErrorBody, call.error_body.size()));
  call.error_body.append(data, keep);
  return bytes;
}

// How an attempt ended.
struct Outcome {
  enum Kind { kDone, kRetry, kFail };
  Kind kind = kDone;
  absl::Status status;  // kFail
  std::string error;    // kRetry: what went wrong, for the final message
  std::optional<absl::Duration> retry_after;
};

Outcome Fail(absl::Status status) { return {Outcome::kFail, std::move(status), "", {}}; }
Outcome Retry(std::string error, std::optional<absl::Duration> retry_after = std::nullopt) {
  return {Outcome::kRetry, absl::OkStatus(), std::move(error), retry_after};
}

// curl failures worth another attempt: the network or the server went away, or was
// too slow; not a bad URL, a TLS certificate that does not verify, or our own abort.
bool IsTransient(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_QUIC_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
      return true;
    default:
      return false;
  }
}

std::string StatusText(const ResponseHeaders& headers) {
  return headers.reason.empty() ? absl::StrCat("HTTP ", headers.status)
                                : absl::StrCat("HTTP ", headers.status, " ", headers.reason);
}

class CurlFetcher final : public HttpFetcher {
 public:
  explicit CurlFetcher(const FetchOptions& options)
      : options_(options), pool_(options.max_connections, counters_) {}

  absl::StatusOr<std::string> Get(const RangeRequest& request) override {
    std::string out;
    // Reserving saves copies; a pinned size bounds a to-the-end read's. Never more than
    // kMaxReserve up front: the size comes from the store (a listing may lie), and the
    // bytes that really come grow the string as they arrive.
    constexpr uint64_t kMaxReserve = uint64_t{64} << 20;
    if (!request.to_end) {
      out.reserve(std::min(request.length, kMaxReserve));
    } else if (request.size > request.offset) {
      out.reserve(std::min(request.size - request.offset, kMaxReserve));
    }
    const Sink sink = [&out](absl::string_view data) {
      out.append(data.data(), data.size());
      return absl::OkStatus();
    };
    absl::Status status = Read(request, sink, /*deadline_follows_progress=*/false);
    if (!status.ok()) return status;
    return out;
  }

  absl::Status GetStreaming(const RangeRequest& request, const Sink& sink) override {
    return Read(request, sink, /*deadline_follows_progress=*/true);
  }

  absl::StatusOr<ObjectHead> Head(const std::string& url,
                                  const std::optional<SigV4>& sign) override {
    Call call;
    call.method = "HEAD";
    call.url = url;
    call.sign = &sign;
    call.head = true;
    absl::Status status = Run(call);
    if (!status.ok()) return status;
    if (!call.headers.content_length.has_value()) {
      counters_.failures.fetch_add(1);
      return AsHostIoError(absl::InvalidArgumentError(
          absl::StrCat(url,
                       ": the server answered HEAD without a Content-Length, so the object's size "
                       "is unknown; serve shards from a server that sends one")));
    }
    return ObjectHead{*call.headers.content_length, call.headers.etag};
  }

  void AddCredentials(const std::string& url_prefix, const UrlCredentials& credentials) override {
    absl::MutexLock lock(&credentials_mu_);
    credentials_[url_prefix] = credentials;
  }

  const FetchCounters& counters() const override { return counters_; }

 private:
  // The credentials of the longest prefix of `url` given to AddCredentials.
  std::optional<UrlCredentials> CredentialsFor(const std::string& url) {
    absl::MutexLock lock(&credentials_mu_);
    std::optional<UrlCredentials> found;
    size_t longest = 0;
    for (const auto& [prefix, credentials] : credentials_) {
      if (absl::StartsWith(url, prefix) && prefix.size() >= longest) {
        longest = prefix.size();
        found = credentials;
      }
    }
    return found;
  }

  absl::Status Read(const RangeRequest& request, const Sink& sink, bool deadline_follows_progress) {
    if (request.to_end && request.length > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          request.url, ": a request for ", request.length, " bytes and to the object's end"));
    }
    // Nothing wanted, nothing asked: an open range would read the whole object.
    if (!request.to_end && request.length == 0) return absl::OkStatus();
    Call call;
    call.url = request.url;
    call.sign = &request.sign;
    call.sink = &sink;
    call.may_be_absent = request.may_be_absent;
    call.cancel = request.cancel;
    call.deadline_follows_progress = deadline_follows_progress;
    call.next_offset = request.offset;
    call.to_end = request.to_end;
    call.remaining = request.length;
    call.etag = request.etag;
    if (request.size > 0) call.size = request.size;
    return Run(call);
  }

  // What a call that failed for good returns: the store's errors marked HostIoError
  // (the store's fault, retried by the serve path, never taken for bad data), a
  // changed object and the sink's own error as they are, a 404 of a file that may be
  // absent as the answer it is. Counted in failures but for that last one.
  absl::Status Failed(const Call& call, absl::Status status) {
    if (call.cancelled) return status;  // no failure of the store's
    const bool answer = call.may_be_absent && absl::IsNotFound(status);
    if (!answer) counters_.failures.fetch_add(1);
    if (answer || call.sink_failed || IsShardChanged(status)) return status;
    return AsHostIoError(std::move(status));
  }

  // Attempts until the call is done, fails for good, or its deadline passes.
  absl::Status Run(Call& call) {
    util::RetryPolicy retry(internal::FetchRetryOptions(options_), options_.clock);
    call.clock = options_.clock;
    call.window = options_.request_deadline;
    call.deadline = retry.deadline();
    const std::string what = absl::StrCat(call.method, " ", call.url);
    std::string last_error = "no attempt";
    int attempts = 0;
    while (true) {
      if (call.Cancelled()) return Cancelled(what);
      Outcome outcome;
      {
        Lease lease(pool_, call.deadline, call.cancel);
        if (lease.get() == nullptr) {
          if (call.Cancelled()) return Cancelled(what);
          last_error = absl::StrCat("no connection free (all ", options_.max_connections,
                                    " in use) before the deadline");
          break;
        }
        if (attempts > 0) counters_.retries.fetch_add(1);
        ++attempts;
        counters_.requests.fetch_add(1);
        outcome = Attempt(lease.get(), call);
      }
      if (outcome.kind == Outcome::kDone) {
        RecordLatency(retry.Elapsed());
        return absl::OkStatus();
      }
      if (outcome.kind == Outcome::kFail) return Failed(call, std::move(outcome.status));
      last_error = outcome.error;
      retry.MoveDeadline(call.deadline);  // moved by progress, for GetStreaming
      internal::RetryStep step =
          internal::NextRetryStep(retry, {outcome.error, outcome.retry_after, call.progress}, what);
      if (step.kind == internal::RetryStep::kRefused) {
        counters_.failures.fetch_add(1);  // (a HostIoError below: not through Failed)
        return AsHostIoError(std::move(step.refusal));
      }
      if (step.kind == internal::RetryStep::kDeadline) break;
      // The wait counts toward the deadline; a cancel ends it at once.
      if (!retry.Wait(step.wait, call.cancel)) return Cancelled(what);
    }
    counters_.failures.fetch_add(1);
    return AsHostIoError(absl::UnavailableError(
        absl::StrCat(what, ": gave up after ", attempts, " attempt", attempts == 1 ? "" : "s",
                     " in ", absl::FormatDuration(retry.Elapsed()),
                     call.deadline_follows_progress
                         ? absl::StrCat(" (no byte for ", absl::FormatDuration(call.window), ")")
                         : absl::StrCat(" (deadline ", absl::FormatDuration(call.window), ")"),
                     "; last error: ", last_error)));
  }

  // What a call whose RangeRequest::cancel was cancelled returns: not the store's
  // failure, so neither counted nor marked.
  static absl::Status Cancelled(const std::string& what) {
    return absl::CancelledError(absl::StrCat(what, ": cancelled"));
  }

  void RecordLatency(absl::Duration latency) {
    counters_.requests_ok.fetch_add(1);
    counters_.latency_sum_us.fetch_add(absl::ToInt64Microseconds(latency));
  }

  // Sets every option of one attempt (the handle is reset: it keeps only its
  // connections and caches), with the headers in `headers` (freed by the caller).
  void Configure(CURL* handle, Call& call, curl_slist*& headers) {
    curl_easy_reset(handle);
    curl_easy_setopt(handle, CURLOPT_URL, call.url.c_str());
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
    curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, call.error_buffer);
    curl_easy_setopt(handle, CURLOPT_USERAGENT, "shardcast");
    curl_easy_setopt(handle, CURLOPT_TCP_KEEPALIVE, 1L);
    // The attempt may use what is left of the request's deadline, at least 1 ms (0
    // would mean no limit).
    const int64_t left_ms =
        std::max<int64_t>(1, absl::ToInt64Milliseconds(call.deadline - call.clock->Now()));
    if (call.deadline_follows_progress || call.cancel != nullptr) {
      curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, OnProgress);
      curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &call);
    }
    // Without a limit on the whole transfer, OnProgress stops it once no byte came in
    // time.
    if (!call.deadline_follows_progress) {
      curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
    }
    curl_easy_setopt(
        handle, CURLOPT_CONNECTTIMEOUT_MS,
        static_cast<long>(std::min<int64_t>(
            left_ms, std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.connect_timeout)))));
    // curl measures a trickle in whole seconds.
    curl_easy_setopt(handle, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.low_speed_bytes));
    curl_easy_setopt(
        handle, CURLOPT_LOW_SPEED_TIME,
        static_cast<long>(std::max<int64_t>(
            1, absl::ToInt64Seconds(absl::Ceil(options_.low_speed_time, absl::Seconds(1))))));
    curl_easy_setopt(handle, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
    curl_easy_setopt(handle, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
    if (!options_.ca_file.empty())
      curl_easy_setopt(handle, CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(handle, CURLOPT_HEADERDATA, &call);
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &call);
    if (call.head) curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);

    if (call.Ranged()) {
      headers = curl_slist_append(
          headers, call.to_end ? absl::StrCat("Range: bytes=", call.next_offset, "-").c_str()
                               : absl::StrCat("Range: bytes=", call.next_offset, "-",
                                              call.next_offset + call.remaining - 1)
                                     .c_str());
    }
    // A weak ETag never matches If-Match (strong comparison): compared afterwards only.
    if (!call.etag.empty() && !absl::StartsWith(call.etag, "W/")) {
      headers = curl_slist_append(headers, absl::StrCat("If-Match: ", call.etag).c_str());
    }
    const std::optional<SigV4>& sign = *call.sign;
    if (sign.has_value()) {
      // curl 7.88 signs every header set here (x-amz-* included) but adds neither of
      // these itself; S3-compatible stores refuse a signed request without the first.
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!sign->session_token.empty()) {
        headers = curl_slist_append(
            headers, absl::StrCat("x-amz-security-token: ", sign->session_token).c_str());
      }
      const std::string provider = absl::StrCat("aws:amz:", sign->region, ":s3");
      curl_easy_setopt(handle, CURLOPT_AWS_SIGV4, provider.c_str());  // curl copies strings
      curl_easy_setopt(handle, CURLOPT_USERNAME, sign->access_key_id.c_str());
      curl_easy_setopt(handle, CURLOPT_PASSWORD, sign->secret_access_key.c_str());
    } else {
      // Public HTTP datasets are often behind a redirect to a CDN; a signed request is
      // never followed elsewhere (its signature names the host).
      curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 1L);
      curl_easy_setopt(handle, CURLOPT_MAXREDIRS, 5L);
      curl_easy_setopt(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
      if (const std::optional<UrlCredentials> basic = CredentialsFor(call.url)) {
        curl_easy_setopt(handle, CURLOPT_USERNAME, basic->user.c_str());
        curl_easy_setopt(handle, CURLOPT_PASSWORD, basic->password.c_str());
      }
    }
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
  }

  Outcome Attempt(CURL* handle, Call& call) {
    call.StartAttempt();
    curl_slist* headers = nullptr;
    Configure(handle, call, headers);
    const CURLcode code = curl_easy_perform(handle);
    curl_slist_free_all(headers);
    curl_off_t received = 0;
    if (curl_easy_getinfo(handle, CURLINFO_SIZE_DOWNLOAD_T, &received) == CURLE_OK) {
      counters_.bytes.fetch_add(received);
    }
    return Classify(call, code);
  }

  Outcome Classify(Call& call, CURLcode code) {
    const ResponseHeaders& response = call.headers;
    if (!call.abort.ok()) return Fail(call.abort);
    if (call.cancelled) {
      return Fail(Cancelled(absl::StrCat(call.method, " ", call.url)));
    }
    // A connection that failed after the last wanted byte failed too late to matter.
    if (call.done || (!call.head && call.Complete())) return {};
    if (call.stalled) {
      return Retry(absl::StrCat("no byte for ", absl::FormatDuration(call.window), " at byte ",
                                call.next_offset));
    }
    const bool success = response.status >= 200 && response.status < 300;
    if (code != CURLE_OK) {
      const std::string error = absl::StrCat(
          curl_easy_strerror(code),
          call.error_buffer[0] != '\0' ? absl::StrCat(" (", call.error_buffer, ")") : "",
          success && !call.head ? absl::StrCat(" at byte ", call.next_offset) : "");
      if (IsTransient(code)) return Retry(error);
      if (code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE) {
        return Fail(AsHostIoError(absl::UnavailableError(
            absl::StrCat(call.url, ": ", error,
                         "; --remote-ca-file names the CA to trust, --remote-insecure "
                         "turns verification off"))));
      }
      return Fail(absl::InvalidArgumentError(absl::StrCat(call.url, ": ", error)));
    }
    if (success) return Finish(call);
    return ErrorStatus(call);
  }

  // A 2xx answer that curl received whole.
  Outcome Finish(Call& call) {
    if (call.head) return {};
    if (!call.checked) {  // no body at all (an empty object)
      absl::Status identity = call.CheckIdentity();
      if (!identity.ok()) return Fail(std::move(identity));
    }
    if (!call.to_end && call.remaining > 0) {
      // A body that ended before the wanted bytes without curl noticing (no length).
      return Retry(absl::StrCat("the body ended at byte ", call.next_offset, ", ", call.remaining,
                                " bytes short"));
    }
    if (call.to_end && call.size.has_value() && call.next_offset < *call.size) {
      return Retry(absl::StrCat("the body ended at byte ", call.next_offset, " of ", *call.size));
    }
    return {};
  }

  // A non-2xx answer.
  Outcome ErrorStatus(Call& call) {
    const ResponseHeaders& response = call.headers;
    const long status = response.status;
    const std::string s3_text = internal::S3ErrorText(call.error_body);
    const std::string text =
        absl::StrCat(StatusText(response), s3_text.empty() ? "" : absl::StrCat(" (", s3_text, ")"));
    if (internal::IsRetryableHttpStatus(status)) {
      return Retry(text, response.retry_after);
    }
    const std::string message = absl::StrCat(call.method, " ", call.url, ": ", text);
    switch (status) {
      case 412:
        return Fail(ShardChangedError(
            call.url, absl::StrCat("ETag ", call.etag, " -> changed (412 Precondition Failed)")));
      case 404:
        return Fail(absl::NotFoundError(message));
      case 401:
      case 403:
        return Fail(absl::PermissionDeniedError(message));
      default:
        return Fail(absl::InvalidArgumentError(message));
    }
  }

  const FetchOptions options_;
  FetchCounters counters_;
  HandlePool pool_;
  absl::Mutex credentials_mu_;
  std::map<std::string, UrlCredentials> credentials_ ABSL_GUARDED_BY(credentials_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFetcher>> HttpFetcher::Create(const FetchOptions& options) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections must be at least 1, not ", options.max_connections));
  }
  if (options.request_deadline <= absl::ZeroDuration() ||
      options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the request deadline and connect timeout must be positive");
  }
  if (options.low_speed_bytes < 0 || options.low_speed_time <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the low-speed limit must be at least 0 bytes/s over a positive time");
  }
  if (options.first_backoff < absl::ZeroDuration() || options.max_backoff < options.first_backoff ||
      options.max_retry_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "backoffs must satisfy 0 <= first_backoff <= max_backoff, max_retry_after >= 0");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("a fetcher needs a clock");
  const CURLcode init = InitCurlOnce();
  if (init != CURLE_OK) {
    return absl::InternalError(
        absl::StrCat("libcurl failed to initialize: ", curl_easy_strerror(init)));
  }
  return std::make_unique<CurlFetcher>(options);
}

}  // namespace shardcast::remote

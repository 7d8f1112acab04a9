// ObjectStore for S3 (ListObjectsV2) and plain HTTP (a HEAD per URL), both reading
// through an HttpFetcher.
#include "common/remote/object_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/s3_xml.h"
#include "common/shards/shard_reader.h"

namespace shardcast::remote {
namespace {

using internal::XmlDecode;
using internal::XmlElements;
using internal::XmlFirstElement;

// The names of shards, as a local dataset takes them.
bool IsShardName(absl::string_view name) {
  return absl::EndsWith(name, ".tar") || absl::EndsWith(name, ".tar.gz") ||
         absl::EndsWith(name, ".tgz");
}

absl::Status NoShardsError(const std::string& root) {
  return absl::NotFoundError(absl::StrCat(root, ": no shards (*.tar, *.tar.gz, *.tgz) are there"));
}

// A ListObjectsV2 page of 1000 keys is a few hundred KB: a store that sends more is not
// answering the listing.
constexpr uint64_t kMaxListPageBytes = uint64_t{16} << 20;

// Reads `request`'s object whole, failing once it passes `max_bytes` rather than
// holding it all.
absl::StatusOr<std::string> GetBounded(HttpFetcher& fetcher, RangeRequest request,
                                       uint64_t max_bytes) {
  request.to_end = true;
  std::string out;
  absl::Status status = fetcher.GetStreaming(request, [&](absl::string_view data) {
    if (data.size() > max_bytes - out.size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(request.url, ": larger than the ", max_bytes, " bytes allowed"));
    }
    out.append(data.data(), data.size());
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

// GetBounded, with nullopt for a file that is not there (404).
absl::StatusOr<std::optional<std::string>> GetSmallFile(HttpFetcher& fetcher, RangeRequest request,
                                                        uint64_t max_bytes) {
  request.may_be_absent = true;  // a 404 is the answer "not there", not a failing store
  absl::StatusOr<std::string> file = GetBounded(fetcher, request, max_bytes);
  if (absl::IsNotFound(file.status())) return std::nullopt;
  if (!file.ok()) return file.status();
  return *std::move(file);
}

class S3Store final : public ObjectStore {
 public:
  S3Store(const DatasetUrl& url, const S3Settings& s3, HttpFetcher* fetcher,
          const internal::ObjectStoreTuning& tuning)
      : root_(absl::StrCat("s3://", url.bucket, "/", url.prefix)),
        bucket_(url.bucket),
        prefix_(url.prefix),
        s3_(s3),
        sign_(SigV4For(s3)),
        fetcher_(*fetcher),
        tuning_(tuning) {}

  const std::string& root() const override { return root_; }

  absl::StatusOr<std::vector<RemoteObject>> ListShards() override {
    std::vector<RemoteObject> shards;
    // Each key with the page it came on, and each token seen: a store that repeats
    // either never ends its listing, or lists a shard twice (served twice an epoch).
    std::unordered_map<std::string, int64_t> page_of;
    std::unordered_set<std::string> tokens;
    std::string token;
    int64_t pages = 0;
    do {
      if (pages == kMaxListPages) {
        return absl::DataLossError(absl::StrCat("listing ", root_, ": still truncated after ",
                                                pages, " pages; the listing does not end"));
      }
      RangeRequest request;
      request.url = ListUrl(token);
      request.sign = sign_;
      absl::StatusOr<std::string> page = GetBounded(fetcher_, request, kMaxListPageBytes);
      // As it is: its message names the bucket's URL, and its payloads must stay.
      if (!page.ok()) return page.status();
      ++pages;
      const size_t first_new = shards.size();
      absl::Status parsed = ParsePage(*page, shards, token);
      if (!parsed.ok()) return parsed;
      if (!token.empty() && !tokens.insert(token).second) {
        return absl::DataLossError(absl::StrCat("listing ", root_, ": page ", pages,
                                                " answered the continuation token \"", token,
                                                "\" again; the listing does not end"));
      }
      for (size_t i = first_new; i < shards.size(); ++i) {
        auto [it, inserted] = page_of.emplace(shards[i].name, pages);
        if (!inserted) {
          return absl::DataLossError(
              absl::StrCat("listing ", root_, ": ", shards[i].name, " is listed twice (pages ",
                           it->second, " and ", pages, "); the store's listing is not consistent"));
        }
      }
    } while (!token.empty());
    if (shards.empty()) return NoShardsError(root_);
    return shards;
  }

  absl::StatusOr<std::optional<std::string>> GetFile(const std::string& name,
                                                     uint64_t max_bytes) override {
    RangeRequest request;
    request.url = s3_.ObjectUrl(bucket_, prefix_ + name);
    request.sign = sign_;
    return GetSmallFile(fetcher_, request, max_bytes);
  }

  RemoteObject Object(const std::string& name, uint64_t size,
                      const std::string& etag) const override {
    return RemoteObject{name, s3_.ObjectUrl(bucket_, prefix_ + name), size, etag};
  }

  RangeRequest Request(const RemoteObject& object, uint64_t offset,
                       uint64_t length) const override {
    return RangeRequest{object.url, sign_, offset, length, object.etag, object.size};
  }

  HttpFetcher& fetcher() override { return fetcher_; }

 private:
  // ListObjectsV2 with the query's parameters in sorted order and percent-encoded:
  // curl 7.88 signs the query as it is written, and SigV4's canonical form is sorted.
  std::string ListUrl(const std::string& token) const {
    std::vector<std::string> query;
    if (!token.empty()) {
      query.push_back(absl::StrCat("continuation-token=", internal::SigV4QueryValue(token)));
    }
    // The delimiter rolls "sub-directories" up into CommonPrefixes, which are skipped.
    query.push_back("delimiter=%2F");
    query.push_back("list-type=2");
    if (tuning_.list_page_size > 0) {
      query.push_back(absl::StrCat("max-keys=", tuning_.list_page_size));
    }
    if (!prefix_.empty()) {
      query.push_back(absl::StrCat("prefix=", internal::SigV4QueryValue(prefix_)));
    }
    return absl::StrCat(s3_.BucketUrl(bucket_), "?", absl::StrJoin(query, "&"));
  }

  // Adds the shards of one ListObjectsV2 page; `token` becomes the next page's, or
  // empty after the last.
  absl::Status ParsePage(absl::string_view xml, std::vector<RemoteObject>& shards,
                         std::string& token) const {
    // (Its opening tag carries the xmlns attribute.)
    if (!absl::StrContains(xml, "<ListBucketResult")) {
      return absl::InternalError(absl::StrCat("listing ", root_,
                                              ": the answer is not a ListObjectsV2 result: \"",
                                              xml.substr(0, 200), "\""));
    }
    for (absl::string_view contents : XmlElements(xml, "Contents")) {
      const std::optional<absl::string_view> key = XmlFirstElement(contents, "Key");
      const std::optional<absl::string_view> size = XmlFirstElement(contents, "Size");
      if (!key.has_value() || !size.has_value()) {
        return absl::InternalError(
            absl::StrCat("listing ", root_, ": an object without Key or Size"));
      }
      RemoteObject object;
      const std::string full_key = XmlDecode(*key);
      if (!absl::StartsWith(full_key, prefix_)) continue;
      object.name = full_key.substr(prefix_.size());
      // Left out as a local dataset leaves out sub-directories (the delimiter already
      // does; this is for stores that ignore it).
      if (object.name.find('/') != std::string::npos || !IsShardName(object.name)) continue;
      if (!absl::SimpleAtoi(*size, &object.size)) {
        return absl::InternalError(absl::StrCat("listing ", root_, ": ", full_key,
                                                " has a Size that is not a number: ", *size));
      }
      object.etag = XmlDecode(XmlFirstElement(contents, "ETag").value_or(""));
      object.url = s3_.ObjectUrl(bucket_, full_key);
      shards.push_back(std::move(object));
    }
    token.clear();
    if (XmlFirstElement(xml, "IsTruncated").value_or("false") == "true") {
      token = XmlDecode(XmlFirstElement(xml, "NextContinuationToken").value_or(""));
      if (token.empty()) {
        return absl::InternalError(
            absl::StrCat("listing ", root_, ": a truncated page without a NextContinuationToken"));
      }
    }
    return absl::OkStatus();
  }

  const std::string root_;
  const std::string bucket_;
  const std::string prefix_;
  const S3Settings s3_;
  const std::optional<SigV4> sign_;
  HttpFetcher& fetcher_;
  const internal::ObjectStoreTuning tuning_;
};

class HttpStore final : public ObjectStore {
 public:
  HttpStore(const DatasetUrl& url, HttpFetcher* fetcher, const internal::ObjectStoreTuning& tuning)
      : root_(url.base), urls_(url.urls), fetcher_(*fetcher), tuning_(tuning) {}

  const std::string& root() const override { return root_; }

  absl::StatusOr<std::vector<RemoteObject>> ListShards() override {
    if (urls_.empty()) return NoShardsError(root_);
    std::vector<RemoteObject> shards(urls_.size());
    for (size_t i = 0; i < urls_.size(); ++i) {
      shards[i].url = urls_[i];
      shards[i].name = urls_[i].substr(std::min(root_.size(), urls_[i].size()));
      if (!absl::StartsWith(urls_[i], root_) || !IsShardName(shards[i].name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(urls_[i], ": not a shard's name (*.tar, *.tar.gz, *.tgz) under ", root_));
      }
    }
    absl::Status status = HeadAll(shards);
    if (!status.ok()) return status;
    return shards;
  }

  absl::StatusOr<std::optional<std::string>> GetFile(const std::string& name,
                                                     uint64_t max_bytes) override {
    RangeRequest request;
    request.url = root_ + name;
    return GetSmallFile(fetcher_, request, max_bytes);
  }

  RemoteObject Object(const std::string& name, uint64_t size,
                      const std::string& etag) const override {
    return RemoteObject{name, root_ + name, size, etag};
  }

  RangeRequest Request(const RemoteObject& object, uint64_t offset,
                       uint64_t length) const override {
    return RangeRequest{object.url, std::nullopt, offset, length, object.etag, object.size};
  }

  HttpFetcher& fetcher() override { return fetcher_; }

 private:
  // Fills in size and ETag with a HEAD per shard, several at once (a dataset of
  // thousands of shards would take minutes one round trip at a time). The first error
  // in URL order is returned; the threads stop taking URLs after any.
  absl::Status HeadAll(std::vector<RemoteObject>& shards) {
    std::vector<absl::Status> errors(shards.size());
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    const auto work = [&] {
      for (size_t i = next++; i < shards.size() && !failed; i = next++) {
        absl::StatusOr<ObjectHead> head = fetcher_.Head(shards[i].url, std::nullopt);
        if (!head.ok()) {
          errors[i] = head.status();
          failed = true;
          continue;
        }
        shards[i].size = head->size;
        shards[i].etag = head->etag;
      }
    };
    const size_t threads = std::min<size_t>(shards.size(), std::max(1, tuning_.list_parallelism));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& thread : pool) thread.join();
    for (absl::Status& error : errors) {
      if (!error.ok()) return error;
    }
    return absl::OkStatus();
  }

  const std::string root_;
  const std::vector<std::string> urls_;
  HttpFetcher& fetcher_;
  const internal::ObjectStoreTuning tuning_;
};

}  // namespace

namespace internal {

std::string SigV4QueryValue(const std::string& value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : value) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(byte) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xF]);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ObjectStore>> OpenObjectStore(const DatasetUrl& url,
                                                             const S3Settings& s3,
                                                             HttpFetcher* fetcher,
                                                             const ObjectStoreTuning& tuning) {
  if (fetcher == nullptr) return absl::InvalidArgumentError("OpenObjectStore without a fetcher");
  switch (url.kind) {
    case DatasetUrl::Kind::kS3:
      return std::make_unique<S3Store>(url, s3, fetcher, tuning);
    case DatasetUrl::Kind::kHttp:
      return std::make_unique<HttpStore>(url, fetcher, tuning);
    case DatasetUrl::Kind::kLocal:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(url.text, ": a local directory, not an object store"));
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<ObjectStore>> OpenObjectStore(const DatasetUrl& url,
                                                             const S3Settings& s3,
                                                             HttpFetcher* fetcher) {
  return internal::OpenObjectStore(url, s3, fetcher, internal::ObjectStoreTuning());
}

absl::Status DownloadObject(ObjectStore& store, const RemoteObject& object, int fd,
                            const std::string& path, ContentHasher* hasher,
                            const util::CancelToken* cancel) {
  const auto sink = [fd, &path, hasher](absl::string_view chunk) {
    if (hasher != nullptr) hasher->Add(chunk);
    while (!chunk.empty()) {
      const ssize_t n = ::write(fd, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return HostIoError(path, "write failed", errno);
      chunk.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  };
  RangeRequest whole = store.Request(object, 0, 0);
  whole.to_end = true;
  whole.cancel = cancel;
  return store.fetcher().GetStreaming(whole, sink);
}

}  // namespace shardcast::remote

// Plain HTTP(S) shards behind the ObjectStore interface: the brace URLs are the
// listing, a HEAD each gives size and ETag.
#include "common/remote/http_store.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/remote/unsigned_url_store.h"

namespace shardcast::remote {
namespace {

class HttpStore final : public internal::UnsignedUrlStore {
 public:
  HttpStore(const DatasetUrl& url, HttpFetcher* fetcher, const internal::ObjectStoreTuning& tuning)
      : UnsignedUrlStore(url.base), urls_(url.urls), fetcher_(*fetcher), tuning_(tuning) {}

  absl::StatusOr<std::vector<RemoteObject>> ListShards() override {
    if (urls_.empty()) return internal::NoShardsError(root_);
    std::vector<RemoteObject> shards(urls_.size());
    for (size_t i = 0; i < urls_.size(); ++i) {
      shards[i].url = urls_[i];
      shards[i].name = urls_[i].substr(std::min(root_.size(), urls_[i].size()));
      if (!absl::StartsWith(urls_[i], root_) || !internal::IsShardName(shards[i].name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(urls_[i], ": not a shard's name (*.tar, *.tar.gz, *.tgz) under ", root_));
      }
    }
    absl::Status status = HeadAll(shards);
    if (!status.ok()) return status;
    return shards;
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

  const std::vector<std::string> urls_;
  HttpFetcher& fetcher_;
  const internal::ObjectStoreTuning tuning_;
};

absl::StatusOr<OpenedStore> OpenFromFlags(const DatasetUrl& url, const StoreFlags&,
                                          HttpFetcher* fetcher,
                                          const internal::ObjectStoreTuning& tuning) {
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = OpenHttpStore(url, fetcher, tuning);
  if (!store.ok()) return store.status();
  return OpenedStore{*std::move(store), ""};
}

}  // namespace

const StoreKind& HttpStoreKind() {
  static constexpr StoreKind kKind{DatasetUrl::Kind::kHttp, "http", nullptr, OpenFromFlags};
  return kKind;
}

absl::StatusOr<std::unique_ptr<ObjectStore>> OpenHttpStore(
    const DatasetUrl& url, HttpFetcher* fetcher, const internal::ObjectStoreTuning& tuning) {
  if (fetcher == nullptr) return absl::InvalidArgumentError("OpenHttpStore without a fetcher");
  if (url.kind != DatasetUrl::Kind::kHttp) {
    return absl::InvalidArgumentError(absl::StrCat(url.text, ": not an http(s):// URL"));
  }
  return std::make_unique<HttpStore>(url, fetcher, tuning);
}

}  // namespace shardcast::remote

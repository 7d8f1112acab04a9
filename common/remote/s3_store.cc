// S3 (ListObjectsV2 pages, SigV4) behind the ObjectStore interface, and the --s3-*
// flags: the one place the server and shardcast-ctl index learn how to reach S3.
#include "common/remote/s3_store.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/remote/s3_xml.h"

namespace shardcast::remote {
namespace {

using internal::XmlDecode;
using internal::XmlElements;
using internal::XmlFirstElement;

// A ListObjectsV2 page of 1000 keys is a few hundred KB: a store that sends more is not
// answering the listing.
constexpr uint64_t kMaxListPageBytes = uint64_t{16} << 20;

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
      absl::StatusOr<std::string> page = internal::GetBounded(fetcher_, request, kMaxListPageBytes);
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
    if (shards.empty()) return internal::NoShardsError(root_);
    return shards;
  }

  absl::StatusOr<std::optional<std::string>> GetFile(const std::string& name,
                                                     uint64_t max_bytes) override {
    RangeRequest request;
    request.url = s3_.ObjectUrl(bucket_, prefix_ + name);
    request.sign = sign_;
    return internal::GetSmallFile(fetcher_, request, max_bytes);
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
      if (object.name.find('/') != std::string::npos || !internal::IsShardName(object.name))
        continue;
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

void AddS3Flags(FlagSet* flags, StoreFlags* dst) {
  S3Flags& s3 = dst->s3;
  flags->OptionalString(
      {{"--s3-endpoint"},
       "URL",
       "S3-compatible endpoint (MinIO, Ceph, GCS: https://storage.googleapis.com);\n"
       "default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url,\n"
       "else AWS's regional endpoint"},
      &s3.endpoint);
  flags->OptionalString({{"--s3-region"},
                         "REGION",
                         "default AWS_REGION, AWS_DEFAULT_REGION, the profile's, else us-east-1"},
                        &s3.region);
  flags->OptionalString({{"--s3-profile"},
                         "NAME",
                         "profile of ~/.aws/credentials and ~/.aws/config (default AWS_PROFILE,\n"
                         "else default); keys in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY win"},
                        &s3.profile);
  flags->OptionalBool({{"--s3-path-style"},
                       "",
                       "address buckets as ENDPOINT/BUCKET/KEY (default with a custom endpoint)"},
                      &s3.path_style);
}

// Resolved for each dataset opened, not once: the environment and ~/.aws files are
// read when the dataset loads, as before the table.
absl::StatusOr<OpenedStore> OpenFromFlags(const DatasetUrl& url, const StoreFlags& flags,
                                          HttpFetcher* fetcher,
                                          const internal::ObjectStoreTuning& tuning) {
  absl::StatusOr<S3Settings> settings = ResolveS3Settings(flags.s3);
  if (!settings.ok()) return settings.status();
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = OpenS3Store(url, *settings, fetcher, tuning);
  if (!store.ok()) return store.status();
  return OpenedStore{*std::move(store), settings->described_source};
}

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

}  // namespace internal

const StoreKind& S3StoreKind() {
  static constexpr StoreKind kKind{DatasetUrl::Kind::kS3, "s3", AddS3Flags, OpenFromFlags};
  return kKind;
}

absl::StatusOr<std::unique_ptr<ObjectStore>> OpenS3Store(
    const DatasetUrl& url, const S3Settings& settings, HttpFetcher* fetcher,
    const internal::ObjectStoreTuning& tuning) {
  if (fetcher == nullptr) return absl::InvalidArgumentError("OpenS3Store without a fetcher");
  if (url.kind != DatasetUrl::Kind::kS3) {
    return absl::InvalidArgumentError(absl::StrCat(url.text, ": not an s3:// URL"));
  }
  return std::make_unique<S3Store>(url, settings, fetcher, tuning);
}

}  // namespace shardcast::remote

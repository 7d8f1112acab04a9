// `shardcast-ctl index SOURCE`: writes the dataset index file (kIndexFileName) of shards
// that exist, in a directory or in object storage, so that a server loads a remote
// dataset's index with one GET instead of reading every shard once. Put the file next
// to the shards.
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/ctl/command_registry.h"
#include "client/ctl/scratch_index_cache.h"
#include "common/flags/flags.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/store_table.h"
#include "common/shards/dataset_index.h"

namespace shardcast::ctl {
namespace {

constexpr char kUsage[] =
    "usage: shardcast-ctl index DIR|URL [--output FILE] [--label-field F] [--max-classes N]\n"
    "         [--s3-endpoint URL] [--s3-region R] [--s3-profile P] [--s3-path-style]\n"
    "\n"
    "Indexes the shards in DIR, at s3://bucket/prefix/, at http(s) URLs in brace notation\n"
    "or at file:///DIR (reading each shard once) and writes the dataset index file,\n"
    "shardcast-index.bin by default. Copy it next to the shards (aws s3 cp\n"
    "shardcast-index.bin s3://bucket/prefix/): a server then loads the index with one GET.\n"
    "It holds no file dates, but each shard's content digest (MD5) and, for shards indexed\n"
    "from a store, the ETag they had there: a server uses a shard's record only when the\n"
    "store's ETag vouches for it (the ETag is that MD5, as S3's for a single-part upload,\n"
    "or the very ETag recorded), and scans the others. It ignores the file (and scans)\n"
    "when the shards' names or sizes differ from\n"
    "it, or its --label-field or --max-classes do.\n";

struct IndexFlags {
  std::string source;
  std::string output = kIndexFileName;
  remote::StoreFlags stores;
  IndexOptions options;
  bool help = false;
  std::string help_text;
};

absl::StatusOr<IndexFlags> ParseFlags(const std::vector<std::string>& args) {
  IndexFlags flags;
  std::vector<std::string> positional;
  FlagSet parser("shardcast-ctl index");
  parser.String({{"--output", "-o"}, "FILE", "where to write the index file"}, &flags.output);
  parser.String({{"--label-field"}, "F", "field of a sample's .json holding its label"},
                &flags.options.label_field);
  parser.Int({{"--max-classes"}, "N", "as the server's --max-classes"}, &flags.options.max_classes,
             1);
  remote::AddStoreFlags(&parser, &flags.stores);
  parser.AcceptPositional(&positional);
  if (absl::Status s = parser.Parse(args); !s.ok()) return s;
  flags.help = parser.help_requested();
  flags.help_text = parser.Help();
  if (!flags.help && positional.size() != 1) {
    return absl::InvalidArgumentError("expected one DIR or URL");
  }
  if (!positional.empty()) flags.source = positional[0];
  return flags;
}

absl::StatusOr<DatasetIndex> IndexOf(const IndexFlags& flags) {
  absl::StatusOr<remote::DatasetUrl> url = remote::ParseDatasetUrl(flags.source);
  if (!url.ok()) return url.status();
  if (url->kind == remote::DatasetUrl::Kind::kLocal) {
    return BuildDatasetIndex(flags.source, flags.options);
  }
  absl::StatusOr<std::unique_ptr<remote::HttpFetcher>> fetcher =
      remote::HttpFetcher::Create(remote::FetchOptions{});
  if (!fetcher.ok()) return fetcher.status();
  absl::StatusOr<remote::RemoteDataset> dataset =
      remote::OpenRemoteDataset(*url, flags.stores, fetcher->get(), flags.options);
  if (!dataset.ok()) return dataset.status();
  return std::move(dataset->index);
}

int RunIndex(const std::vector<std::string>& args) {
  absl::StatusOr<IndexFlags> flags = ParseFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "shardcast-ctl index: %s\n\n%s",
                 std::string(flags.status().message()).c_str(), kUsage);
    return 2;
  }
  if (flags->help) {
    std::printf("%s\nflags:\n%s", kUsage, flags->help_text.c_str());
    return 0;
  }
  // The samples stay in a temporary index cache and the file is written a shard at a
  // time: memory that grows with the shards, as the server's.
  absl::StatusOr<ScratchIndexCache> cache = ScratchIndexCache::Use(flags->source, &flags->options);
  absl::StatusOr<DatasetIndex> index = cache.ok() ? IndexOf(*flags) : cache.status();
  if (!index.ok()) {
    std::fprintf(stderr, "shardcast-ctl index: %s\n",
                 RedactUrlsIn(index.status().ToString()).c_str());
    return 1;
  }
  if (absl::Status written = WriteIndexFileAt(*index, flags->options, flags->output);
      !written.ok()) {
    std::fprintf(stderr, "shardcast-ctl index: %s\n", RedactUrlsIn(written.ToString()).c_str());
    return 1;
  }
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(flags->output, ec);
  std::printf("%s: %zu shards, %lld samples, fingerprint %s -> %s (%zu bytes)\n",
              RedactedUrl(index->root).c_str(), index->shards.size(),
              static_cast<long long>(index->num_samples), index->fingerprint.c_str(),
              flags->output.c_str(), static_cast<size_t>(ec ? 0 : bytes));
  return 0;
}

RegisterCommand reg("index",
                    {"write the dataset index file of shards (dir, s3://, https://)", RunIndex});

}  // namespace
}  // namespace shardcast::ctl

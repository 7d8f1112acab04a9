// ObjectStore against real stores on loopback: s3rver (ListObjectsV2 pages, GetFile,
// SigV4 through the fault proxy's verifier) and nginx (brace URLs, a HEAD each).
#include "common/remote/object_store.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/http_store.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/s3_settings.h"
#include "common/remote/s3_store.h"
#include "common/remote/s3_xml.h"
#include "common/remote/store_table.h"
#include "common/shards/dataset_index.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/object_servers.h"
#include "tests/support/remote_clients.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using ::shardcast::testing_util::FaultProxy;
using ::shardcast::testing_util::MakeQuickFetcher;
using ::shardcast::testing_util::NginxServer;
using ::shardcast::testing_util::S3rverServer;
using ::shardcast::testing_util::S3rverSettings;
using ::shardcast::testing_util::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

DatasetUrl Parse(const std::string& text) {
  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl(text);
  EXPECT_TRUE(url.ok()) << url.status();
  return url.ok() ? *url : DatasetUrl();
}

std::vector<std::string> Names(std::vector<RemoteObject> objects) {
  std::vector<std::string> names;
  for (const RemoteObject& object : objects) names.push_back(object.name);
  std::sort(names.begin(), names.end());
  return names;
}

// s3rver with a bucket holding shards, other files, a "sub-directory" and a sibling
// prefix that shares the dataset's name as a string prefix.
class S3StoreTest : public ::testing::Test {
 protected:
  static constexpr char kBucket[] = "datasets";
  // s3rver knows no other key id; the proxy checks the signature made with the secret.
  static constexpr const char* kKeyId = S3rverServer::kAccessKeyId;
  static constexpr const char* kSecret = testing_util::kS3rverTestSecret;

  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<S3rverServer>> s3 = S3rverServer::Start();
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = s3->release();
    ASSERT_TRUE(s3_->CreateBucket(kBucket).ok());
    objects_ = new std::map<std::string, std::string>{
        {"train/shard-000000.tar", "zero"},
        {"train/shard-000001.tar", "one!"},
        {"train/shard-000002.tar", std::string(3000, 'x')},
        {"train/shard 000003+copy.tar", "three"},  // encoded in URLs and signatures
        {"train/shard-000004.tar.gz", "four"},
        {"train/shard-000005.tgz", "five"},
        {"train/notes.txt", "not a shard"},
        {"train/shardcast-index.bin", "INDEX"},
        {"train/sub/shard-000000.tar", "nested"},
        {"train2/shard-000000.tar", "a sibling dataset"},
    };
    for (const auto& [key, bytes] : *objects_) {
      ASSERT_TRUE(s3_->Put(kBucket, key, bytes).ok()) << key;
    }
    absl::StatusOr<std::unique_ptr<FaultProxy>> proxy = FaultProxy::Start(s3_->endpoint());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = proxy->release();
  }
  static void TearDownTestSuite() {
    delete proxy_;
    delete s3_;
    delete objects_;
  }
  void SetUp() override {
    ASSERT_NE(proxy_, nullptr);
    ASSERT_TRUE(proxy_->ClearFaults().ok());
    fetcher_ = MakeQuickFetcher();
  }

  std::unique_ptr<ObjectStore> Open(const std::string& url, const S3Settings& settings,
                                    int page_size = 0) {
    internal::ObjectStoreTuning tuning;
    tuning.list_page_size = page_size;
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        OpenS3Store(Parse(url), settings, fetcher_.get(), tuning);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  static std::map<std::string, std::string>* objects_;
  static S3rverServer* s3_;
  static FaultProxy* proxy_;
  std::unique_ptr<HttpFetcher> fetcher_;
};
std::map<std::string, std::string>* S3StoreTest::objects_ = nullptr;
S3rverServer* S3StoreTest::s3_ = nullptr;
FaultProxy* S3StoreTest::proxy_ = nullptr;

const std::vector<std::string> kTrainShards = {"shard 000003+copy.tar", "shard-000000.tar",
                                               "shard-000001.tar",      "shard-000002.tar",
                                               "shard-000004.tar.gz",   "shard-000005.tgz"};

TEST_F(S3StoreTest, ListsShardsDirectlyUnderThePrefix) {
  std::unique_ptr<ObjectStore> store = Open("s3://datasets/train", S3rverSettings(s3_->endpoint()));
  EXPECT_EQ(store->root(), "s3://datasets/train/");
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(Names(*shards), kTrainShards);
  for (const RemoteObject& shard : *shards) {
    const std::string& bytes = objects_->at("train/" + shard.name);
    EXPECT_EQ(shard.size, bytes.size()) << shard.name;
    // The listing's ETag is the one a read sees.
    absl::StatusOr<ObjectHead> head =
        fetcher_->Head(shard.url, SigV4For(S3rverSettings(s3_->endpoint())));
    ASSERT_TRUE(head.ok()) << head.status();
    EXPECT_EQ(shard.etag, head->etag) << shard.name;
    EXPECT_EQ(shard.url, S3rverSettings(s3_->endpoint()).ObjectUrl(kBucket, "train/" + shard.name));
    // And the pinned request reads the object's bytes.
    absl::StatusOr<std::string> got = fetcher_->Get(store->Request(shard, 1, 2));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, bytes.substr(1, 2));
    const RemoteObject again = store->Object(shard.name, shard.size, shard.etag);
    EXPECT_EQ(again.url, shard.url);
  }
}

TEST_F(S3StoreTest, PagesThroughContinuationTokens) {
  std::unique_ptr<ObjectStore> store =
      Open("s3://datasets/train/", S3rverSettings(s3_->endpoint()), /*page_size=*/2);
  const int64_t before = fetcher_->counters().requests.load();
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(Names(*shards), kTrainShards);
  // 8 objects and a common prefix, 2 a page.
  EXPECT_GE(fetcher_->counters().requests.load() - before, 4);
}

TEST_F(S3StoreTest, SignedListingAndReadsPassTheVerifier) {
  ASSERT_TRUE(proxy_->VerifySigV4(kKeyId, kSecret).ok());
  S3Settings settings = S3rverSettings(proxy_->url());
  settings.session_token = "session/token+=";
  // Pages of 2: continuation tokens (base64: '+', '/', '=') must be signed as sent.
  std::unique_ptr<ObjectStore> store = Open("s3://datasets/train/", settings, 2);
  const int64_t bad_before = *proxy_->Count("bad_signature");
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(Names(*shards), kTrainShards);
  for (const RemoteObject& shard : *shards) {
    absl::StatusOr<std::string> got = fetcher_->Get(store->Request(shard, 0, shard.size));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, objects_->at("train/" + shard.name));
  }
  absl::StatusOr<std::optional<std::string>> index = store->GetFile(kIndexFileName, 1 << 20);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->value_or("(none)"), "INDEX");
  EXPECT_EQ(*proxy_->Count("bad_signature") - bad_before, 0);
}

TEST_F(S3StoreTest, WrongSecretIsPermissionDenied) {
  ASSERT_TRUE(proxy_->VerifySigV4(kKeyId, kSecret).ok());
  std::unique_ptr<ObjectStore> store =
      Open("s3://datasets/train/", S3rverSettings(proxy_->url(), "wrong"));
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kPermissionDenied) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(shards.status().message(), HasSubstr("/datasets/"));
}

TEST_F(S3StoreTest, EmptyPrefixOrMissingBucketIsNotFound) {
  std::unique_ptr<ObjectStore> store =
      Open("s3://datasets/nothing-here/", S3rverSettings(s3_->endpoint()));
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kNotFound) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr("s3://datasets/nothing-here/"));

  store = Open("s3://no-such-bucket/train/", S3rverSettings(s3_->endpoint()));
  shards = store->ListShards();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kNotFound) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr("no-such-bucket"));
  EXPECT_THAT(shards.status().message(), HasSubstr("NoSuchBucket"));
}

TEST_F(S3StoreTest, GetFilePresentAbsentAndTooLarge) {
  std::unique_ptr<ObjectStore> store =
      Open("s3://datasets/train/", S3rverSettings(s3_->endpoint()));
  absl::StatusOr<std::optional<std::string>> file = store->GetFile(kIndexFileName, 1 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->value_or("(none)"), "INDEX");
  file = store->GetFile("absent.bin", 1 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->has_value());
  file = store->GetFile(kIndexFileName, 3);
  EXPECT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr(kIndexFileName));
}

// nginx serving shard-000000.tar .. shard-000003.tar, an index file and a text file.
class HttpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("object_store_test");
    std::filesystem::create_directory(dir_->path() + "/d");
    for (int i = 0; i < 4; ++i) {
      Write(absl::StrCat("d/shard-00000", i, ".tar"), std::string(100 + i, 'a' + i));
    }
    Write("d/shardcast-index.bin", "INDEX");
    Write("d/readme.txt", "text");
    absl::StatusOr<std::unique_ptr<NginxServer>> nginx = NginxServer::Start(dir_->path());
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = std::move(*nginx);
    fetcher_ = MakeQuickFetcher();
  }

  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream out(*dir_ / name, std::ios::binary);
    out << bytes;
  }

  std::unique_ptr<ObjectStore> Open(const std::string& url) {
    absl::StatusOr<std::unique_ptr<ObjectStore>> store = OpenHttpStore(Parse(url), fetcher_.get());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<NginxServer> nginx_;
  std::unique_ptr<HttpFetcher> fetcher_;
};

// An "S3 endpoint" that is nginx serving files in place of listings: a store that
// answers the listing with something else gets an error naming it, never a crash or a
// page held whole however large.
TEST_F(HttpStoreTest, AHostileListingIsAnErrorNamingTheStore) {
  const auto list = [&](const std::string& bucket, const std::string& page) {
    std::filesystem::create_directory(*dir_ / bucket);
    Write(bucket + "/index.html", page);
    S3Settings settings;
    settings.endpoint = nginx_->url();
    settings.path_style = true;
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        OpenS3Store(Parse("s3://" + bucket + "/"), settings, fetcher_.get());
    EXPECT_TRUE(store.ok()) << store.status();
    return (*store)->ListShards().status();
  };
  absl::Status status = list("html", "<html>not a listing</html>");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("s3://html/"));
  status = list("huge", "<ListBucketResult>" + std::string(17 << 20, ' '));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  status = list("size",
                "<ListBucketResult><Contents><Key>a.tar</Key>"
                "<Size>99999999999999999999999</Size></Contents></ListBucketResult>");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("not a number"));
  status = list("nokey", "<ListBucketResult><Contents><Size>3</Size></Contents>");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  status = list("cut", "<ListBucketResult><IsTruncated>true</IsTruncated>");
  EXPECT_THAT(status.message(), HasSubstr("without a NextContinuationToken"));
}

TEST_F(HttpStoreTest, BraceUrlsListWithAHeadEach) {
  std::unique_ptr<ObjectStore> store = Open(nginx_->url() + "/d/shard-{000000..000003}.tar");
  EXPECT_EQ(store->root(), nginx_->url() + "/d/");
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_EQ(shards->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const RemoteObject& shard = (*shards)[i];
    EXPECT_EQ(shard.name, absl::StrCat("shard-00000", i, ".tar"));  // expansion order
    EXPECT_EQ(shard.url, nginx_->url() + "/d/" + shard.name);
    EXPECT_EQ(shard.size, 100u + i);
    EXPECT_FALSE(shard.etag.empty());
    absl::StatusOr<std::string> got = fetcher_->Get(store->Request(shard, 0, shard.size));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, std::string(100 + i, 'a' + i));
    EXPECT_EQ(store->Object(shard.name, shard.size, shard.etag).url, shard.url);
  }
  EXPECT_EQ(fetcher_->counters().connections_in_use.load(), 0);
}

TEST_F(HttpStoreTest, MissingShardIsNotFoundNamingItsUrl) {
  std::unique_ptr<ObjectStore> store = Open(nginx_->url() + "/d/shard-{000000..000005}.tar");
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kNotFound) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr(nginx_->url() + "/d/shard-000004.tar"));
}

TEST_F(HttpStoreTest, UrlThatIsNotAShardIsInvalid) {
  std::unique_ptr<ObjectStore> store = Open(nginx_->url() + "/d/{shard-000000.tar,readme.txt}");
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kInvalidArgument) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr("readme.txt"));
}

TEST_F(HttpStoreTest, GetFilePresentAndAbsent) {
  std::unique_ptr<ObjectStore> store = Open(nginx_->url() + "/d/shard-{000000..000003}.tar");
  absl::StatusOr<std::optional<std::string>> file = store->GetFile(kIndexFileName, 1 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->value_or("(none)"), "INDEX");
  std::filesystem::remove(*dir_ / ("d/" + std::string(kIndexFileName)));
  file = store->GetFile(kIndexFileName, 1 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->has_value());
}

TEST(ObjectStoreTest, LocalUrlIsNotAStore) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  DatasetUrl url;
  url.text = "/data/train";
  url.dir = "/data/train";
  EXPECT_EQ(OpenStore(url, StoreFlags(), fetcher.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(S3XmlTest, DecodesEntities) {
  EXPECT_EQ(internal::XmlDecode("&quot;abc&quot; &amp; &lt;&gt; &apos;"), "\"abc\" & <> '");
  EXPECT_EQ(internal::XmlDecode("caf&#233; &#x41;&#66;"), "caf\xC3\xA9 AB");
  EXPECT_EQ(internal::XmlDecode("a & b &bogus; &#xZZ; &#-1;"), "a & b &bogus; &#xZZ; &#-1;");
}

TEST(S3XmlTest, FindsElements) {
  const std::string xml =
      "<R><Contents><Key>a&amp;b</Key></Contents><Contents><Key/></Contents>"
      "<IsTruncated>true</IsTruncated></R>";
  EXPECT_THAT(internal::XmlElements(xml, "Key"), ElementsAre("a&amp;b", ""));
  EXPECT_EQ(internal::XmlFirstElement(xml, "IsTruncated").value_or(""), "true");
  EXPECT_FALSE(internal::XmlFirstElement(xml, "NextContinuationToken").has_value());
}

TEST(S3XmlTest, ErrorText) {
  EXPECT_EQ(internal::S3ErrorText("<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>"
                                  "<Message>Access &quot;denied&quot;</Message></Error>"),
            "AccessDenied: Access \"denied\"");
  EXPECT_EQ(internal::S3ErrorText("<html><body>404 Not Found</body></html>"), "");
  EXPECT_EQ(internal::S3ErrorText(""), "");
}

TEST(SigV4QueryTest, EncodesAllButUnreserved) {
  EXPECT_EQ(internal::SigV4QueryValue("train/a b+c=d~e_f.g-h"), "train%2Fa%20b%2Bc%3Dd~e_f.g-h");
  EXPECT_EQ(internal::SigV4QueryValue("\xC3\xA9"), "%C3%A9");
}

}  // namespace
}  // namespace shardcast::remote

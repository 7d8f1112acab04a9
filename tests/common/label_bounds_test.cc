// Labels from untrusted shards never size anything unbounded: a label outside
// [0, max_classes) is skipped with its reason (an info.json "num_classes" above the
// bound is ignored), the bound is part of the index cache's key, and a num_classes
// far above the labels that occur is reported.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/shards/dataset_index.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::MakeTar;
using shard_testing::ScopedTempDir;
using shard_testing::TarWriter;
using shard_testing::WriteFile;

// Samples key_i with the given labels (fake image bytes: the index never decodes).
std::vector<FileSpec> Labelled(const std::vector<std::string>& labels) {
  std::vector<FileSpec> files;
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string key = "s" + std::to_string(i);
    files.push_back({key + ".jpg", "not decoded by the index"});
    files.push_back({key + ".cls", labels[i]});
    files.push_back({key + ".json", "{\"class\": \"name" + std::to_string(i) + "\"}"});
  }
  return files;
}

// A dataset directory `dir` holding one ustar shard of Labelled(labels).
void MakeDataset(const ScopedTempDir& tmp, const std::string& dir,
                 const std::vector<std::string>& labels) {
  std::filesystem::create_directories(dir);
  MakeTar(tmp.path(), Labelled(labels), TarWriter::kPythonUstar, dir + "/shard-0.tar");
}

bool HasWarning(const DatasetIndex& index, const std::string& text) {
  for (const std::string& w : index.warnings) {
    if (absl::StrContains(w, text)) return true;
  }
  return false;
}

TEST(LabelBoundsTest, HugeLabelIsSkippedAndClassNamesStayBounded) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeDataset(tmp, data, {"0", "2147483646", "1"});
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data, IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_samples, 2);
  EXPECT_EQ(index->num_classes, 2);
  EXPECT_EQ(index->class_names.size(), 2u);
  ASSERT_EQ(index->skipped.size(), 1u);
  EXPECT_EQ(index->skipped[0].key, "s1");
  EXPECT_TRUE(absl::StrContains(index->skipped[0].reason, "outside [0, 1000000)"))
      << index->skipped[0].reason;
}

TEST(LabelBoundsTest, MaxClassesOptionAndTheCacheKeyedOnIt) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeDataset(tmp, data, {"0", "7", "1"});
  IndexOptions options;
  options.cache_dir = tmp.path() + "/cache";
  options.max_classes = 5;
  absl::StatusOr<DatasetIndex> strict = BuildDatasetIndex(data, options);
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_EQ(strict->num_samples, 2);
  EXPECT_EQ(strict->num_classes, 2);
  // Another bound must not reuse that cache: label 7 is fine under 8.
  options.max_classes = 8;
  absl::StatusOr<DatasetIndex> loose = BuildDatasetIndex(data, options);
  ASSERT_TRUE(loose.ok()) << loose.status();
  EXPECT_FALSE(loose->loaded_from_cache);
  EXPECT_EQ(loose->num_samples, 3);
  EXPECT_EQ(loose->num_classes, 8);
  EXPECT_NE(loose->fingerprint, strict->fingerprint);
  absl::StatusOr<DatasetIndex> again = BuildDatasetIndex(data, options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->loaded_from_cache);
  EXPECT_EQ(again->num_samples, 3);
}

TEST(LabelBoundsTest, InfoJsonNumClassesAboveTheBoundIsIgnored) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeDataset(tmp, data, {"0", "1", "2"});
  WriteFile(data + "/info.json", "{\"dataset size\": 3, \"num_classes\": 2147483647}");
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data, IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_classes, 3);
  EXPECT_EQ(index->class_names.size(), 3u);
  EXPECT_TRUE(HasWarning(*index, "above --max-classes 1000000; using 3"));
}

TEST(LabelBoundsTest, NumClassesFarAboveTheDistinctLabelsIsReported) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  // One stray label (999) among labels 0..2: 1000 outputs for 4 classes that occur.
  MakeDataset(tmp, data, {"0", "1", "2", "999", "1"});
  absl::StatusOr<DatasetIndex> sparse = BuildDatasetIndex(data, IndexOptions());
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_EQ(sparse->num_classes, 1000);
  EXPECT_TRUE(HasWarning(*sparse, "num_classes is 1000 but only 4 distinct labels occur"));

  // Dense labels: no such warning.
  const std::string dense_dir = tmp.path() + "/dense";
  MakeDataset(tmp, dense_dir, {"0", "1", "2", "3"});
  absl::StatusOr<DatasetIndex> dense = BuildDatasetIndex(dense_dir, IndexOptions());
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_FALSE(HasWarning(*dense, "distinct labels"));
}

}  // namespace
}  // namespace shardcast

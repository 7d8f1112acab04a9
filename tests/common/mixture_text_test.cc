// --mix's spellings (mixture_text.h): the text form, the JSON file of a schedule or of
// constant weights, and the errors a user sees for each kind of mistake.
#include "common/plan/mixture_text.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/util/json_fields.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using Weights = std::vector<std::pair<std::string, double>>;

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& content) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(MixtureTextTest, JsonTreeKeepsNestedValuesInOrder) {
  absl::StatusOr<JsonTree> tree = ParseJsonTree(R"( [1, {"b": 2.5, "a": "x", "b": [true]}] )");
  ASSERT_TRUE(tree.ok()) << tree.status();
  ASSERT_EQ(tree->value.kind, JsonValue::Kind::kArray);
  ASSERT_EQ(tree->children.size(), 2u);
  EXPECT_EQ(tree->children[0].value.integer, 1);
  const JsonTree& object = tree->children[1];
  ASSERT_EQ(object.children.size(), 3u);  // the duplicate kept: the caller decides
  EXPECT_EQ(object.children[0].key, "b");
  EXPECT_EQ(object.children[0].value.number, 2.5);
  EXPECT_EQ(object.children[1].value.string, "x");
  EXPECT_EQ(object.children[2].value.kind, JsonValue::Kind::kArray);
  EXPECT_EQ(object.children[2].children.at(0).value.kind, JsonValue::Kind::kBool);
  EXPECT_FALSE(ParseJsonTree("[1,]").ok());
  EXPECT_FALSE(ParseJsonTree("").ok());
  EXPECT_FALSE(ParseJsonTree("{} {}").ok());
}

TEST(MixtureTextTest, JsonScheduleEqualsTheTextForm) {
  absl::StatusOr<std::vector<MixturePoint>> json = ParseMixtureJson(R"([
    {"step": 0, "weights": {"a": 0.9, "b": 0.1}},
    {"weights": {"a": 0.5, "b": 0.5}, "step": 5000}
  ])");
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<std::vector<MixturePoint>> text =
      ParseMixtureText("0:a=0.9,b=0.1;5000:a=0.5,b=0.5");
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(json->size(), 2u);
  for (size_t p = 0; p < 2; ++p) {
    EXPECT_EQ((*json)[p].step, (*text)[p].step);
    EXPECT_EQ((*json)[p].weights, (*text)[p].weights);
  }
  EXPECT_EQ(MixtureText(*json), "0:a=0.9,b=0.1;5000:a=0.5,b=0.5");
}

TEST(MixtureTextTest, JsonObjectIsConstantWeights) {
  absl::StatusOr<std::vector<MixturePoint>> json = ParseMixtureJson(R"({"a": 0.7, "b": 3})");
  ASSERT_TRUE(json.ok()) << json.status();
  ASSERT_EQ(json->size(), 1u);
  EXPECT_EQ((*json)[0].step, 0);
  EXPECT_EQ((*json)[0].weights, (Weights{{"a", 0.7}, {"b", 3.0}}));
}

TEST(MixtureTextTest, BadJsonSaysWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([{"step": 0, "weights": {"a": 1}})", "invalid JSON at byte"},
      {R"("a=1")", "the document is a string"},
      {R"([])", "no point"},
      {R"([3])", "point 0 is a number"},
      {R"([{"step": 0.5, "weights": {"a": 1}}])", "\"step\" is a number with a fraction"},
      {R"([{"step": "0", "weights": {"a": 1}}])", "\"step\" is a string"},
      {R"([{"weights": {"a": 1}}])", "point 0 has no \"step\""},
      {R"([{"step": 0}])", "point 0 has no \"weights\""},
      {R"([{"step": 0, "weights": [1]}])", "the weights are an array"},
      {R"([{"step": 0, "weights": {"a": "0.5"}}])", "the weight of 'a' is a string"},
      {R"([{"step": 0, "weights": {"a": 1}, "wieghts": {}}])", "unknown key 'wieghts'"},
      {R"({"a": 1, "a": 2})", "'a' is named twice"},
  };
  for (const auto& [json, expected] : cases) {
    absl::StatusOr<std::vector<MixturePoint>> points = ParseMixtureJson(json);
    ASSERT_FALSE(points.ok()) << json;
    EXPECT_EQ(points.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_TRUE(absl::StartsWith(points.status().message(), "mix: ")) << points.status();
    EXPECT_TRUE(absl::StrContains(points.status().message(), expected))
        << json << " -> " << points.status();
  }
}

TEST(MixtureTextTest, FlagReadsAFileAndNamesItInErrors) {
  shard_testing::ScopedTempDir dir;
  const std::string schedule = WriteFile(
      dir.path(), "schedule.json",
      R"([{"step": 0, "weights": {"a": 0.9, "b": 0.1}}, {"step": 10, "weights": {"a": 0.5, "b": 0.5}}])");
  absl::StatusOr<std::vector<MixturePoint>> points = ParseMixtureFlag(schedule);
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(MixtureText(*points), "0:a=0.9,b=0.1;10:a=0.5,b=0.5");

  // An existing file is read whatever its name ends with.
  const std::string constant = WriteFile(dir.path(), "weights", R"({"a": 1, "b": 2})");
  points = ParseMixtureFlag(constant);
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(MixtureText(*points), "a=1,b=2");

  // Not a file: the text form.
  points = ParseMixtureFlag("a=1,b=2");
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(points->at(0).weights, (Weights{{"a", 1.0}, {"b", 2.0}}));

  const std::string bad = WriteFile(dir.path(), "bad.json", R"([{"step": 0, "weights": {"a": }}])");
  points = ParseMixtureFlag(bad);
  ASSERT_FALSE(points.ok());
  EXPECT_TRUE(absl::StartsWith(points.status().message(), "mix: " + bad + ": invalid JSON at byte"))
      << points.status();

  // Ends in .json but is missing: the file was meant, so its absence is the error.
  points = ParseMixtureFlag(dir.path() + "/missing.json");
  ASSERT_FALSE(points.ok());
  EXPECT_EQ(points.status().code(), absl::StatusCode::kNotFound) << points.status();
  EXPECT_TRUE(absl::StrContains(points.status().message(), "missing.json")) << points.status();
}

}  // namespace
}  // namespace shardcast

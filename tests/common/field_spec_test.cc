// Field specs: the one spelling of the members a job asks for (common/plan/field_spec.h).
#include "common/plan/field_spec.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;

TEST(FieldSpecTest, ParsesExtensionsAlternativesAndOptional) {
  absl::StatusOr<FieldSpec> txt = ParseFieldSpec("txt");
  ASSERT_TRUE(txt.ok()) << txt.status();
  EXPECT_EQ(txt->alternatives, std::vector<std::string>{"txt"});
  EXPECT_FALSE(txt->optional);

  absl::StatusOr<FieldSpec> image = ParseFieldSpec("JPG;png;Seg.PNG?");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->alternatives, (std::vector<std::string>{"jpg", "png", "seg.png"}));
  EXPECT_TRUE(image->optional);
  EXPECT_EQ(image->Name(), "jpg;png;seg.png");
  EXPECT_EQ(image->ToString(), "jpg;png;seg.png?");
  absl::StatusOr<FieldSpec> again = ParseFieldSpec(image->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *image);
}

TEST(FieldSpecTest, RefusesWhatNoMemberNameCanBeNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"?", "empty extension"},
      {"a..b", "empty component"},
      {".txt", "empty component"},
      {"txt.", "empty component"},
      {"jpg;;png", "empty extension"},
      {"a/b", "'/'"},
      {"t xt", "printable ASCII"},
      {std::string("t\0x", 3), "printable ASCII"},
      {"txt??", "misplaced"},
      {"jpg;JPG", "given twice"},
      {std::string(300, 'x'), "longer than 128 characters (300)"},
  };
  for (const auto& [text, why] : cases) {
    absl::StatusOr<FieldSpec> spec = ParseFieldSpec(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(why)) << text;
  }
}

TEST(FieldSpecTest, ListsAreBoundedAndNamesUnique) {
  std::vector<std::string> thousand(1000, "txt");
  absl::StatusOr<std::vector<FieldSpec>> many = ParseFieldSpecs(thousand);
  ASSERT_FALSE(many.ok());
  EXPECT_THAT(many.status().message(), HasSubstr("1000 asked for, at most 64"));

  absl::StatusOr<std::vector<FieldSpec>> twice = ParseFieldSpecs({"txt", "json", "txt?"});
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("'txt' asked for twice"));

  absl::StatusOr<std::vector<FieldSpec>> list = ParseFieldSpecList("txt,json?,jpg;png");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(FieldSpecsString(*list), "txt,json?,jpg;png");
  absl::StatusOr<std::vector<FieldSpec>> none = ParseFieldSpecList("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace shardcast

// WebDataset grouping rules (tariterators.py) case by case, the key/ext split checked
// against the regex itself, and the step from member groups to labelled index entries.
#include "common/shards/sample_grouping.h"

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/util/json_fields.h"
#include "gtest/gtest.h"

namespace shardcast {
namespace {

struct SplitCase {
  std::string name;
  bool matches;
  std::string key;
  std::string ext;
};

TEST(SplitKeyExtTest, Table) {
  const std::vector<SplitCase> cases = {
      {"abc.jpg", true, "abc", "jpg"},
      {"dir/abc.def.jpg", true, "dir/abc", "def.jpg"},  // DESIGN.md
      {"a.b/c.jpg", true, "a.b/c", "jpg"},              // DESIGN.md: dots in dirs are fine
      {"n01440764_10026.JPEG", true, "n01440764_10026", "JPEG"},  // case kept here
      {"x.seg.png", true, "x", "seg.png"},
      {"x.", true, "x", ""},
      {"noext", false, "", ""},
      {"dir.d/noext", false, "", ""},
      {".hidden", false, "", ""},
      {"dir/.jpg", true, "dir/", "jpg"},  // [^.]+ may hold the '/': regex says so
      {"a.b/.jpg", false, "", ""},
      {"a/b.c/d.e.f", true, "a/b.c/d", "e.f"},
      {"a//b.jpg", true, "a//b", "jpg"},
      {"/abs/k.cls", true, "/abs/k", "cls"},
      {"..", false, "", ""},
      {"", false, "", ""},
  };
  for (const SplitCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::optional<KeyExt> got = SplitKeyExt(c.name);
    ASSERT_EQ(got.has_value(), c.matches);
    if (c.matches) {
      EXPECT_EQ(got->key, c.key);
      EXPECT_EQ(got->ext, c.ext);
    }
  }
}

// The hand-written split equals webdataset's regex on thousands of generated names.
TEST(SplitKeyExtTest, AgreesWithTheWebdatasetRegex) {
  const std::regex re(R"(^((?:.*/|)[^.]+)[.]([^/]*)$)");
  std::mt19937 rng(42);
  const std::string alphabet = "ab./_X";
  for (int i = 0; i < 20000; ++i) {
    std::string name;
    const int len = static_cast<int>(rng() % 10);
    for (int k = 0; k < len; ++k) name.push_back(alphabet[rng() % alphabet.size()]);
    std::smatch m;
    const bool matches = std::regex_match(name, m, re);
    std::optional<KeyExt> got = SplitKeyExt(name);
    ASSERT_EQ(got.has_value(), matches) << "'" << name << "'";
    if (matches) {
      EXPECT_EQ(got->key, m[1].str()) << name;
      EXPECT_EQ(got->ext, m[2].str()) << name;
    }
  }
}

TEST(IsMetadataNameTest, Table) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"__key__", true},        {"__url__.txt", false},  // ends with .txt: a name, not meta
      {"__meta__/a.jpg", true}, {"__x__/", true},       {"___", true},  // "__" and "__" overlap
      {"___/a.jpg", false},     {"a/__key__", false},   {"__key", false},
      {"key__", false},         {"__a.b__", true},      {"_x_.jpg", false},
  };
  for (const auto& [name, meta] : cases) EXPECT_EQ(IsMetadataName(name), meta) << name;
}

struct GroupCase {
  std::string label;
  std::vector<std::string> names;
  // Expected groups: "key:ext,ext" (+ "!" when the group is bad); keyless member indices.
  std::vector<std::string> groups;
  std::vector<size_t> keyless;
};

std::vector<std::string> Describe(const Grouping& g) {
  std::vector<std::string> out;
  for (const MemberGroup& group : g.groups) {
    std::string s = group.key + ":";
    for (size_t i = 0; i < group.exts.size(); ++i) s += (i ? "," : "") + group.exts[i];
    if (!group.error.empty()) s += "!";
    out.push_back(s);
  }
  return out;
}

TEST(GroupByKeysTest, Table) {
  const std::vector<GroupCase> cases = {
      {"plain", {"a.jpg", "a.json", "b.jpg", "b.cls"}, {"a:jpg,json", "b:jpg,cls"}, {}},
      {"ext lower-cased, key not", {"A.JPG", "A.Json", "a.jpg"}, {"A:jpg,json", "a:jpg"}, {}},
      {"multi-dot ext", {"x.seg.png", "x.jpg"}, {"x:seg.png,jpg"}, {}},
      {"directories in names",
       {"d1/k.jpg", "d1/k.cls", "d2/k.jpg", "a.b/c.jpg"},
       {"d1/k:jpg,cls", "d2/k:jpg", "a.b/c:jpg"},
       {}},
      {"non-consecutive equal keys are two samples",
       {"a.jpg", "b.jpg", "a.cls"},
       {"a:jpg", "b:jpg", "a:cls"},
       {}},
      {"metadata skipped without breaking a sample",
       {"a.jpg", "__key__", "__meta__/x.json", "a.cls"},
       {"a:jpg,cls"},
       {}},
      {"no-dot names reported, do not break a sample",
       {"a.jpg", "README", "a.cls"},
       {"a:jpg,cls"},
       {1}},
      {"duplicate ext makes the sample bad",
       {"a.jpg", "a.JPG", "a.cls", "b.jpg"},
       {"a:jpg,cls!", "b:jpg"},
       {}},
      {"empty", {}, {}, {}},
  };
  for (const GroupCase& c : cases) {
    SCOPED_TRACE(c.label);
    std::vector<absl::string_view> names(c.names.begin(), c.names.end());
    const Grouping g = GroupByKeys(names);
    EXPECT_EQ(Describe(g), c.groups);
    EXPECT_EQ(g.keyless, c.keyless);
  }
}

TEST(GroupByKeysTest, DuplicateErrorNamesTheMember) {
  const std::vector<absl::string_view> names = {"k.jpg", "k.jpg"};
  const Grouping g = GroupByKeys(names);
  ASSERT_EQ(g.groups.size(), 1u);
  EXPECT_NE(g.groups[0].error.find("duplicate extension 'jpg'"), std::string::npos);
}

// Members for MakeSampleEntry: "name" -> content; offsets are the member's position.
struct EntryCase {
  std::string label;
  std::vector<std::pair<std::string, std::string>> members;
  std::string label_field = "label";
  int64_t want_label = -1;           // when ok: -1 for a sample without a label
  std::string want_image_ext;        // when ok: "" for a sample without an image
  std::string want_class;            // when ok
  std::string want_error_substring;  // "": expect ok
};

TEST(MakeSampleEntryTest, Table) {
  const std::vector<EntryCase> cases = {
      {"cls", {{"k.jpg", "J"}, {"k.cls", " 7\n"}}, "label", 7, "jpg", "", ""},
      {"json",
       {{"k.jpg", "J"}, {"k.json", "{\"label\": 3, \"class\": \"cat\"}"}},
       "label",
       3,
       "jpg",
       "cat",
       ""},
      {"cls wins over json label, json still names the class",
       {{"k.jpg", "J"}, {"k.json", "{\"label\": 3, \"class\": \"cat\"}"}, {"k.cls", "5"}},
       "label",
       5,
       "jpg",
       "cat",
       ""},
      {"custom field, nested objects skipped",
       {{"k.png", "P"},
        {"k.json", "{\"meta\": {\"label\": 9, \"x\": [1, {\"y\": null}]}, \"target\": 4}"}},
       "target",
       4,
       "png",
       "",
       ""},
      {"jpeg", {{"k.jpeg", "J"}, {"k.cls", "0"}}, "label", 0, "jpeg", "", ""},
      {"exact image ext preferred over seg.png",
       {{"k.seg.png", "S"}, {"k.jpg", "J"}, {"k.cls", "1"}},
       "label",
       1,
       "jpg",
       "",
       ""},
      {"seg.png when it is the only image",
       {{"k.seg.png", "S"}, {"k.cls", "1"}},
       "label",
       1,
       "seg.png",
       "",
       ""},
      // Whether a sample without an image or a label is served is the dataset's question.
      {"no image", {{"k.txt", "T"}, {"k.cls", "1"}}, "label", 1, "", "", ""},
      {"webp only", {{"k.webp", "W"}, {"k.cls", "1"}}, "label", 1, "webp", "", ""},
      {"webp before png", {{"k.webp", "W"}, {"k.png", "P"}}, "label", -1, "webp", "", ""},
      {"gif is no image", {{"k.gif", "G"}, {"k.cls", "0"}}, "label", 0, "", "", ""},
      {"no label", {{"k.jpg", "J"}}, "label", -1, "jpg", "", ""},
      {"neither image nor label", {{"k.txt", "T"}, {"k.npy", "N"}}, "label", -1, "", "", ""},
      {"class without a label names nothing",
       {{"k.jpg", "J"}, {"k.json", "{\"class\": \"cat\"}"}},
       "label",
       -1,
       "jpg",
       "",
       ""},
      {"bad cls", {{"k.jpg", "J"}, {"k.cls", "seven"}}, "label", -1, "", "", "not an integer"},
      {"negative cls", {{"k.jpg", "J"}, {"k.cls", "-2"}}, "label", -1, "", "", "negative"},
      {"bad json",
       {{"k.jpg", "J"}, {"k.json", "{\"label\": 3"}},
       "label",
       -1,
       "",
       "",
       "invalid JSON"},
      {"json field missing: metadata, no label",
       {{"k.jpg", "J"}, {"k.json", "{\"lbl\": 3}"}},
       "label",
       -1,
       "jpg",
       "",
       ""},
      {"json label not integer",
       {{"k.jpg", "J"}, {"k.json", "{\"label\": 3.5}"}},
       "label",
       -1,
       "",
       "",
       "not an integer"},
      {"json label string",
       {{"k.jpg", "J"}, {"k.json", "{\"label\": \"3\"}"}},
       "label",
       -1,
       "",
       "",
       "not an integer"},
      {"json top level array",
       {{"k.jpg", "J"}, {"k.json", "[1]"}},
       "label",
       -1,
       "",
       "",
       "invalid JSON"},
      {"huge label",
       {{"k.jpg", "J"}, {"k.cls", "99999999999"}},
       "label",
       -1,
       "",
       "",
       "label 99999999999 in 'k.cls' is outside [0, 1000000)"},
      {"label at the default --max-classes",
       {{"k.jpg", "J"}, {"k.cls", "1000000"}},
       "label",
       -1,
       "",
       "",
       "outside [0, 1000000)"},
      {"json label over --max-classes",
       {{"k.jpg", "J"}, {"k.json", "{\"label\": 2147483646, \"class\": \"x\"}"}},
       "label",
       -1,
       "",
       "",
       "label 2147483646 in field 'label' of 'k.json' is outside [0, 1000000)"},
      {"largest label below --max-classes",
       {{"k.jpg", "J"}, {"k.cls", "999999"}},
       "label",
       999999,
       "jpg",
       "",
       ""},
  };
  for (const EntryCase& c : cases) {
    SCOPED_TRACE(c.label);
    std::vector<TarMember> members;
    std::vector<std::string> names;
    for (const auto& [name, content] : c.members) {
      TarMember m;
      m.name = name;
      m.offset = 512 * (members.size() + 1);
      m.size = content.size();
      m.content = content;
      m.has_content = absl::EndsWith(name, ".cls") || absl::EndsWith(name, ".json");
      members.push_back(m);
      names.push_back(name);
    }
    std::vector<absl::string_view> views(names.begin(), names.end());
    const Grouping g = GroupByKeys(views);
    ASSERT_EQ(g.groups.size(), 1u);
    absl::StatusOr<LabeledSample> got = MakeSampleEntry(g.groups[0], members, c.label_field);
    if (!c.want_error_substring.empty()) {
      ASSERT_FALSE(got.ok());
      EXPECT_NE(got.status().message().find(c.want_error_substring), std::string::npos)
          << got.status();
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->entry.key, "k");
    EXPECT_EQ(got->entry.label, c.want_label);
    EXPECT_EQ(got->class_name, c.want_class);
    ASSERT_EQ(got->entry.members.size(), members.size());
    const MemberRef* image = ImageMember(got->entry);
    EXPECT_EQ(image == nullptr ? "" : image->ext, c.want_image_ext);
    EXPECT_EQ(image == nullptr, got->entry.image_member == kNoImageMember);
    for (size_t i = 0; i < members.size(); ++i) {
      EXPECT_EQ(got->entry.members[i].offset, members[i].offset);
      EXPECT_EQ(got->entry.members[i].size, members[i].size);
    }
  }
}

TEST(MakeSampleEntryTest, MaxClassesIsTheBound) {
  const std::vector<absl::string_view> names = {"k.jpg", "k.cls"};
  std::vector<TarMember> members(2);
  members[0].name = "k.jpg";
  members[1].name = "k.cls";
  members[1].content = "9";
  members[1].has_content = true;
  const Grouping g = GroupByKeys(names);
  absl::StatusOr<LabeledSample> fits = MakeSampleEntry(g.groups[0], members, "label", 10);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->entry.label, 9);
  absl::StatusOr<LabeledSample> over = MakeSampleEntry(g.groups[0], members, "label", 9);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("outside [0, 9) (raise --max-classes"), std::string::npos)
      << over.status();
}

TEST(MakeSampleEntryTest, BadGroupIsSkippedWithItsReason) {
  const std::vector<absl::string_view> names = {"k.jpg", "k.jpg", "k.cls"};
  std::vector<TarMember> members(3);
  const Grouping g = GroupByKeys(names);
  absl::StatusOr<LabeledSample> got = MakeSampleEntry(g.groups[0], members, "label");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("duplicate extension"), std::string::npos);
}

TEST(JsonFieldsTest, ParsesTopLevelFields) {
  absl::StatusOr<std::map<std::string, JsonValue>> f = ParseJsonObjectFields(
      " {\"dataset size\": 1281167, \"num_classes\":1000, \"neg\": -5, \"f\": 1e3,"
      " \"s\": \"a\\\"b\\u00e9\\ud83d\\ude00\\n\", \"t\": true, \"n\": null,"
      " \"o\": {\"deep\": [[[]]]}, \"big\": 123456789012345678901234, \"neg\": -6 }\n");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->at("dataset size").integer, 1281167);
  EXPECT_EQ(f->at("num_classes").integer, 1000);
  EXPECT_EQ(f->at("neg").integer, -6);  // duplicate key: last wins, as in Python
  EXPECT_EQ(f->at("f").kind, JsonValue::Kind::kNumber);
  EXPECT_EQ(f->at("s").string, "a\"b\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_EQ(f->at("t").kind, JsonValue::Kind::kBool);
  EXPECT_EQ(f->at("n").kind, JsonValue::Kind::kNull);
  EXPECT_EQ(f->at("o").kind, JsonValue::Kind::kObject);
  EXPECT_EQ(f->at("big").kind, JsonValue::Kind::kNumber);  // does not fit int64
}

TEST(JsonFieldsTest, RejectsMalformedDocuments) {
  for (const std::string& bad : std::vector<std::string>{
           "", "{", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "{\"a\":01}", "{\"a\":1} x", "{'a':1}",
           "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{\"a\":[1,]}", "{\"a\":-}",
           "{\"a\":\"unterminated}", std::string(100, '[')}) {
    EXPECT_FALSE(ParseJsonObjectFields(bad).ok()) << bad;
  }
  std::string deep = "{\"a\":";
  for (int i = 0; i < 100000; ++i) deep += "[";
  EXPECT_FALSE(ParseJsonObjectFields(deep).ok());  // depth-limited, no stack overflow
}

TEST(JsonFieldsTest, QuoteRoundTrips) {
  const std::string s = std::string("a\"b\\c\n\t\x01 \xc3\xa9 ") + std::string(1, '\0');
  const std::string doc = "{\"k\": " + JsonQuote(s) + "}";
  absl::StatusOr<std::map<std::string, JsonValue>> f = ParseJsonObjectFields(doc);
  ASSERT_TRUE(f.ok()) << f.status() << doc;
  EXPECT_EQ(f->at("k").string, s);
  EXPECT_EQ(JsonQuote("\xff"), "\"\\ufffd\"");  // invalid UTF-8 never leaks into JSON
}

}  // namespace
}  // namespace shardcast

// The hand-written XML reading of S3's answers: linear in the document's size (a
// 2 MiB ListObjectsV2 page once took 27 s: every element searched the rest of the
// page for its empty form).
#include "common/remote/s3_xml.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardcast::remote::internal {
namespace {

// A ListObjectsV2 page of `keys` objects, as S3 writes it.
std::string ListPage(int keys) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name><IsTruncated>false"
      "</IsTruncated>";
  for (int i = 0; i < keys; ++i) {
    absl::StrAppend(&xml, "<Contents><Key>data/shard-", i,
                    ".tar</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>"
                    "&quot;0123456789abcdef0123456789abcdef&quot;</ETag><Size>",
                    1000 + i, "</Size><StorageClass>STANDARD</StorageClass></Contents>");
  }
  return xml + "</ListBucketResult>";
}

// What ListShards does with a page: every Contents, its Key, Size and ETag.
size_t ParsePage(const std::string& xml) {
  size_t found = 0;
  for (absl::string_view contents : XmlElements(xml, "Contents")) {
    found += XmlFirstElement(contents, "Key").has_value() +
             XmlFirstElement(contents, "Size").has_value() +
             XmlFirstElement(contents, "ETag").has_value();
  }
  return found + XmlFirstElement(xml, "IsTruncated").has_value();
}

// The bytes a parse of `xml` looked at, per byte of the page.
double SearchedPerByte(const std::string& xml, size_t expect) {
  const uint64_t before = XmlSearchedBytes();
  EXPECT_EQ(ParsePage(xml), expect);
  return static_cast<double>(XmlSearchedBytes() - before) / static_cast<double>(xml.size());
}

// Counted, not timed: the bytes the parse looks at per byte of the page stay the same
// for a page 8 times larger (quadratic, they grew with the page: a 2 MiB page looked
// at each byte thousands of times, 27 s).
TEST(S3XmlTest, ParsingAListPageIsLinearInItsSize) {
  const int keys = 1000;
  const std::string small = ListPage(keys);
  const std::string large = ListPage(8 * keys);
  const double small_per_byte = SearchedPerByte(small, 3 * keys + 1);
  const double large_per_byte = SearchedPerByte(large, 3 * 8 * keys + 1);
  // Each element's contents are looked at once by XmlElements and about twice by each
  // XmlFirstElement in it (for <tag> and <tag/>).
  EXPECT_LT(small_per_byte, 10);
  EXPECT_LT(large_per_byte, 10);
  EXPECT_LT(large_per_byte, 1.5 * small_per_byte);
}

TEST(S3XmlTest, ElementsEmptyElementsAndCutDocuments) {
  EXPECT_EQ(XmlElements("<a>1</a><a/><b>x</b><a>2</a>", "a"),
            (std::vector<absl::string_view>{"1", "", "2"}));
  EXPECT_EQ(XmlElements("<a/><a>1</a><a/>", "a"), (std::vector<absl::string_view>{"", "1", ""}));
  EXPECT_EQ(XmlElements("<a>1</a><a>cut", "a"), (std::vector<absl::string_view>{"1"}));
  EXPECT_EQ(XmlFirstElement("<b/><a>first</a><a>second</a>", "a"), "first");
  EXPECT_EQ(XmlFirstElement("<b>x</b>", "a"), std::nullopt);
  EXPECT_EQ(XmlFirstElement("<a/><a>x</a>", "a"), "");
}

}  // namespace
}  // namespace shardcast::remote::internal

// The little XML that S3 answers with (ListObjectsV2 results, error bodies), read by
// hand: its documents are flat, their elements carry no attributes we need, and a
// full parser would be a dependency for five tags. Internal to common/remote.
#ifndef SHARDCAST_COMMON_REMOTE_S3_XML_H_
#define SHARDCAST_COMMON_REMOTE_S3_XML_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardcast::remote::internal {

// The raw (undecoded) contents of every <tag>...</tag> in `xml`, in order; an empty
// element <tag/> counts as an empty one. Elements are not nested in themselves in S3's
// documents, so the first closing tag ends each.
std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag);

// The first such element's contents, nullopt when there is none.
std::optional<absl::string_view> XmlFirstElement(absl::string_view xml, absl::string_view tag);

// The bytes that XmlElements and XmlFirstElement have looked at on this thread so far:
// each call looks at a document about once (tests hold them to it).
uint64_t XmlSearchedBytes();

// `text` with the five named entities (&amp; &lt; &gt; &quot; &apos;) and numeric
// references (&#38; &#x26;) replaced; anything else (a stray '&') is kept as it is.
std::string XmlDecode(absl::string_view text);

// "Code: Message" of an S3 error document (<Error><Code>..</Code><Message>..</Message>),
// decoded; just the one that is there when the other is missing; empty when `body` is
// not one (nginx's HTML error pages, an empty HEAD body).
std::string S3ErrorText(absl::string_view body);

}  // namespace shardcast::remote::internal

#endif  // SHARDCAST_COMMON_REMOTE_S3_XML_H_

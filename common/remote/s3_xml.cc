#include "common/remote/s3_xml.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardcast::remote::internal {
namespace {

// Appends code point `cp` as UTF-8; false for one that UTF-8 cannot carry.
bool AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    return false;
  }
  return true;
}

// Decodes the entity `name` (between '&' and ';') onto `out`; false when unknown.
bool AppendEntity(absl::string_view name, std::string& out) {
  if (name == "amp") return out.push_back('&'), true;
  if (name == "lt") return out.push_back('<'), true;
  if (name == "gt") return out.push_back('>'), true;
  if (name == "quot") return out.push_back('"'), true;
  if (name == "apos") return out.push_back('\''), true;
  if (name.size() < 2 || name[0] != '#') return false;
  uint32_t cp = 0;
  const bool hex = name[1] == 'x' || name[1] == 'X';
  const absl::string_view digits = name.substr(hex ? 2 : 1);
  if (digits.empty() || digits.size() > 8) return false;
  const bool parsed = hex ? absl::SimpleHexAtoi(digits, &cp) : absl::SimpleAtoi(digits, &cp);
  // SimpleAtoi accepts a sign and spaces, which a character reference does not.
  for (char c : digits) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return parsed && AppendUtf8(cp, out);
}

}  // namespace

namespace {

thread_local uint64_t searched_bytes = 0;

// xml.find(needle, pos), counting the bytes it looked at (XmlSearchedBytes).
size_t Find(absl::string_view xml, absl::string_view needle, size_t pos) {
  const size_t at = xml.find(needle, pos);
  const size_t end = at == absl::string_view::npos ? xml.size() : at + needle.size();
  searched_bytes += end > pos ? end - pos : 0;
  return at;
}

// Finds the elements <tag>...</tag> (or <tag/>) of `xml` one after the other, each
// search starting where the last ended, so all of them cost one pass over `xml`.
class ElementScanner {
 public:
  ElementScanner(absl::string_view xml, absl::string_view tag)
      : xml_(xml),
        open_(absl::StrCat("<", tag, ">")),
        empty_(absl::StrCat("<", tag, "/>")),
        close_(absl::StrCat("</", tag, ">")) {}

  // The next element's raw contents; nullopt when there is no other (or it is cut
  // short: what came before stands).
  std::optional<absl::string_view> Next() {
    if (pos_ >= xml_.size()) return std::nullopt;
    // Searched again only once passed: searching for each from pos_ every time would
    // scan the rest of the document per element when the other form never occurs
    // (quadratic: a 2 MiB page took 27 s).
    if (!started_ || (at_open_ != absl::string_view::npos && at_open_ < pos_)) {
      at_open_ = Find(xml_, open_, pos_);
    }
    if (!started_ || (at_empty_ != absl::string_view::npos && at_empty_ < pos_)) {
      at_empty_ = Find(xml_, empty_, pos_);
    }
    started_ = true;
    if (at_empty_ != absl::string_view::npos && at_empty_ < at_open_) {
      pos_ = at_empty_ + empty_.size();
      return absl::string_view();
    }
    if (at_open_ == absl::string_view::npos) return std::nullopt;
    const size_t begin = at_open_ + open_.size();
    const size_t end = Find(xml_, close_, begin);
    if (end == absl::string_view::npos) {
      pos_ = xml_.size();
      return std::nullopt;
    }
    pos_ = end + close_.size();
    return xml_.substr(begin, end - begin);
  }

 private:
  const absl::string_view xml_;
  const std::string open_, empty_, close_;
  size_t pos_ = 0;
  // The next occurrence of each form at or after some earlier pos_ (npos: none left).
  size_t at_open_ = absl::string_view::npos;
  size_t at_empty_ = absl::string_view::npos;
  bool started_ = false;  // searched once
};

}  // namespace

uint64_t XmlSearchedBytes() { return searched_bytes; }

std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag) {
  ElementScanner scanner(xml, tag);
  std::vector<absl::string_view> out;
  while (std::optional<absl::string_view> element = scanner.Next()) out.push_back(*element);
  return out;
}

std::optional<absl::string_view> XmlFirstElement(absl::string_view xml, absl::string_view tag) {
  return ElementScanner(xml, tag).Next();
}

std::string XmlDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '&') {
      const size_t semi = text.find(';', i + 1);
      // References are short: a ';' far away belongs to something else.
      if (semi != absl::string_view::npos && semi - i <= 12 &&
          AppendEntity(text.substr(i + 1, semi - i - 1), out)) {
        i = semi + 1;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

std::string S3ErrorText(absl::string_view body) {
  // "<Error" as the root may carry attributes (an xmlns) in some stores.
  if (!absl::StrContains(body, "<Error")) return "";
  const std::optional<absl::string_view> code = XmlFirstElement(body, "Code");
  const std::optional<absl::string_view> message = XmlFirstElement(body, "Message");
  if (code.has_value() && message.has_value()) {
    return absl::StrCat(XmlDecode(*code), ": ", XmlDecode(*message));
  }
  if (code.has_value()) return XmlDecode(*code);
  if (message.has_value()) return XmlDecode(*message);
  return "";
}

}  // namespace shardcast::remote::internal

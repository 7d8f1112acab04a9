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

std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag) {
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string empty = absl::StrCat("<", tag, "/>");
  const std::string close = absl::StrCat("</", tag, ">");
  std::vector<absl::string_view> out;
  size_t pos = 0;
  while (pos < xml.size()) {
    const size_t at_open = xml.find(open, pos);
    const size_t at_empty = xml.find(empty, pos);
    if (at_empty != absl::string_view::npos && at_empty < at_open) {
      out.push_back(absl::string_view());
      pos = at_empty + empty.size();
      continue;
    }
    if (at_open == absl::string_view::npos) break;
    const size_t begin = at_open + open.size();
    const size_t end = xml.find(close, begin);
    if (end == absl::string_view::npos) break;  // cut short: what came before stands
    out.push_back(xml.substr(begin, end - begin));
    pos = end + close.size();
  }
  return out;
}

std::optional<absl::string_view> XmlFirstElement(absl::string_view xml, absl::string_view tag) {
  // Only the first is wanted, but documents are small enough not to bother stopping.
  std::vector<absl::string_view> all = XmlElements(xml, tag);
  if (all.empty()) return std::nullopt;
  return all.front();
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

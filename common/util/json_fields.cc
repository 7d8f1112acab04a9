// A small recursive-descent JSON reader (RFC 8259) that keeps the top-level fields, or,
// for ParseJsonTree, the whole document.
#include "common/util/json_fields.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/util/utf8.h"

namespace shardcast {
namespace {

// Deep enough for any label file; bounded so hostile input cannot overflow the stack.
constexpr int kMaxDepth = 64;

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::map<std::string, JsonValue>> ParseTopLevel() {
    std::map<std::string, JsonValue> fields;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{' at the top level");
    SkipSpace();
    if (!Consume('}')) {
      while (true) {
        SkipSpace();
        std::string key;
        if (absl::Status s = ParseString(&key); !s.ok()) return s;
        SkipSpace();
        if (!Consume(':')) return Error("expected ':'");
        SkipSpace();
        JsonValue value;
        if (absl::Status s = ParseValue(&value, 1); !s.ok()) return s;
        fields[std::move(key)] = std::move(value);
        SkipSpace();
        if (Consume(',')) continue;
        if (Consume('}')) break;
        return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters after the object");
    return fields;
  }

  absl::StatusOr<JsonTree> ParseTree() {
    JsonTree tree;
    SkipSpace();
    if (AtEnd()) return Error("no value");
    if (absl::Status s = ParseValue(&tree.value, 1, &tree); !s.ok()) return s;
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters after the value");
    return tree;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON at byte ", pos_, ": ", what));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  bool Consume(char c) {
    if (Peek() != c || AtEnd()) return false;
    ++pos_;
    return true;
  }
  void SkipSpace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                        text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // `keep`, when set, is the tree whose value `out` is: containers then keep their
  // contents in it.
  absl::Status ParseValue(JsonValue* out, int depth, JsonTree* keep = nullptr) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    switch (Peek()) {
      case '{':
        out->kind = JsonValue::Kind::kObject;
        return ParseContainer('{', '}', depth, keep);
      case '[':
        out->kind = JsonValue::Kind::kArray;
        return ParseContainer('[', ']', depth, keep);
      case '"':
        out->kind = JsonValue::Kind::kString;
        return ParseString(&out->string);
      case 't':
        if (!ConsumeWord("true")) return Error("bad literal");
        out->kind = JsonValue::Kind::kBool;
        out->integer = 1;
        return absl::OkStatus();
      case 'f':
        if (!ConsumeWord("false")) return Error("bad literal");
        out->kind = JsonValue::Kind::kBool;
        out->integer = 0;
        return absl::OkStatus();
      case 'n':
        if (!ConsumeWord("null")) return Error("bad literal");
        out->kind = JsonValue::Kind::kNull;
        return absl::OkStatus();
      default:
        return ParseNumber(out);
    }
  }

  // Objects and arrays below the top level: validated; contents kept in `keep` when set,
  // else dropped (label files keep only top-level fields).
  absl::Status ParseContainer(char open, char close, int depth, JsonTree* keep) {
    Consume(open);
    SkipSpace();
    if (Consume(close)) return absl::OkStatus();
    while (true) {
      SkipSpace();
      JsonTree child;
      if (open == '{') {
        if (absl::Status s = ParseString(&child.key); !s.ok()) return s;
        SkipSpace();
        if (!Consume(':')) return Error("expected ':'");
        SkipSpace();
      }
      if (absl::Status s = ParseValue(&child.value, depth + 1, keep != nullptr ? &child : nullptr);
          !s.ok()) {
        return s;
      }
      if (keep != nullptr) keep->children.push_back(std::move(child));
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(close)) return absl::OkStatus();
      return Error(open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }

  absl::Status ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    Consume('-');
    if (Consume('0')) {
    } else if (Peek() >= '1' && Peek() <= '9') {
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    } else {
      return Error("unexpected character");
    }
    bool integral = true;
    if (Consume('.')) {
      integral = false;
      if (!(Peek() >= '0' && Peek() <= '9')) return Error("digit expected after '.'");
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      integral = false;
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!(Peek() >= '0' && Peek() <= '9')) return Error("digit expected in exponent");
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    }
    const std::string literal(text_.substr(start, pos_ - start));
    out->number = std::strtod(literal.c_str(), nullptr);
    out->kind = JsonValue::Kind::kNumber;
    if (integral) {
      errno = 0;
      const long long v = std::strtoll(literal.c_str(), nullptr, 10);
      if (errno != ERANGE) {
        out->kind = JsonValue::Kind::kInteger;
        out->integer = v;
      }
    }
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool ParseHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  absl::Status ParseString(std::string* out) {
    if (!Consume('"')) return Error("expected a string");
    out->clear();
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (AtEnd()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!ParseHex4(&cp)) return Error("bad \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (ConsumeWord("\\u") && ParseHex4(&low) && low >= 0xDC00 && low <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              return Error("unpaired surrogate in \\u escape");
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Error("unpaired surrogate in \\u escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::map<std::string, JsonValue>> ParseJsonObjectFields(absl::string_view text) {
  return JsonParser(text).ParseTopLevel();
}

absl::StatusOr<JsonTree> ParseJsonTree(absl::string_view text) {
  return JsonParser(text).ParseTree();
}

std::string JsonQuote(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c == '\r') {
      out += "\\r";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
      ++i;
    } else {
      const size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace shardcast

// S3 settings resolved as the AWS CLI resolves them, so a user's existing environment
// and ~/.aws files work unchanged; every value remembers where it came from because a
// wrong bucket region or a stale profile is otherwise hard to tell from the logs.
#include "common/remote/s3_settings.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/util/regular_file.h"

namespace shardcast::remote {
namespace {

// AWS files are a few KiB; a bigger one is a mistake (or not an AWS file) and is not
// worth holding in memory.
constexpr int64_t kMaxAwsFileBytes = 1 << 20;

// Section name -> key (lowercase) -> value. Keys of an indented block under "s3 ="
// are stored as "s3.key" so that they never pass for the profile's own keys.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;

// The comment character starts a comment only at the start of a value or after
// whitespace: "a#b" stays one value, as in the AWS SDKs.
absl::string_view StripInlineComment(absl::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    if ((value[i] == '#' || value[i] == ';') &&
        (i == 0 || absl::ascii_isspace(static_cast<unsigned char>(value[i - 1])))) {
      return absl::StripTrailingAsciiWhitespace(value.substr(0, i));
    }
  }
  return value;
}

// "[profile   x]" and "[profile x]" are the same section.
std::string NormalizeSection(absl::string_view name) {
  name = absl::StripAsciiWhitespace(name);
  std::vector<absl::string_view> words =
      absl::StrSplit(name, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (words.size() == 2 && words[0] == "profile") return absl::StrCat("profile ", words[1]);
  return std::string(name);
}

IniSections ParseIni(absl::string_view content) {
  if (absl::StartsWith(content, "\xEF\xBB\xBF")) content.remove_prefix(3);  // a UTF-8 BOM
  IniSections sections;
  std::map<std::string, std::string>* section = nullptr;
  std::string block;  // the key of an "s3 =" line whose indented lines follow
  for (absl::string_view raw : absl::StrSplit(content, '\n')) {
    const bool indented = !raw.empty() && (raw[0] == ' ' || raw[0] == '\t');
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      block.clear();
      const size_t close = line.find(']');
      section = close == absl::string_view::npos
                    ? nullptr  // a broken header: its keys belong to no profile
                    : &sections[NormalizeSection(line.substr(1, close - 1))];
      continue;
    }
    const size_t eq = line.find('=');
    if (section == nullptr || eq == absl::string_view::npos) continue;
    std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const absl::string_view value =
        StripInlineComment(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (indented && !block.empty()) {
      (*section)[absl::StrCat(block, ".", key)] = std::string(value);
      continue;
    }
    block = value.empty() ? key : std::string();
    (*section)[std::move(key)] = std::string(value);
  }
  return sections;
}

// An AWS file: where it is, what named it, and its sections (none when it is absent).
struct AwsFile {
  std::string path;      // empty: no path (neither its variable nor HOME is set)
  std::string named_by;  // "AWS_CONFIG_FILE" or "$HOME"
  IniSections sections;

  const std::map<std::string, std::string>* Find(const std::string& section) const {
    auto it = sections.find(section);
    return it == sections.end() ? nullptr : &it->second;
  }
};

std::optional<std::string> NonEmpty(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> value = env(name);
  // `AWS_REGION= cmd` unsets a variable for one command; empty means unset.
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

absl::StatusOr<AwsFile> LoadAwsFile(const EnvLookup& env, const std::string& variable,
                                    const std::string& home_relative) {
  AwsFile file;
  if (std::optional<std::string> path = NonEmpty(env, variable); path.has_value()) {
    file.path = *path;
    file.named_by = variable;
  } else if (std::optional<std::string> home = NonEmpty(env, "HOME"); home.has_value()) {
    file.path = absl::StrCat(*home, "/", home_relative);
    file.named_by = "$HOME";
  } else {
    return file;
  }
  absl::StatusOr<std::string> content = ReadRegularFile(file.path, kMaxAwsFileBytes);
  // The AWS CLI runs without these files; only one that is there and unreadable is wrong.
  if (absl::IsNotFound(content.status())) return file;
  if (!content.ok()) {
    return absl::Status(content.status().code(),
                        absl::StrCat("cannot read ", file.path, " (from ", file.named_by,
                                     "): ", content.status().message()));
  }
  file.sections = ParseIni(*content);
  return file;
}

// A value and where it came from ("AWS_REGION", "--s3-region", "~/.aws/config [default]").
struct Sourced {
  std::string value;
  std::string source;
};

// The config file's section for `profile`: [profile NAME], and for "default" [default]
// first ([profile default] is accepted there too, as botocore accepts it).
std::pair<const std::map<std::string, std::string>*, std::string> ConfigSection(
    const AwsFile& config, const std::string& profile) {
  if (profile == "default") {
    if (const auto* s = config.Find("default"); s != nullptr) return {s, "[default]"};
  }
  const std::string name = absl::StrCat("profile ", profile);
  return {config.Find(name), absl::StrCat("[", name, "]")};
}

std::optional<Sourced> FileValue(const std::map<std::string, std::string>* section,
                                 const std::string& key, const std::string& where) {
  if (section == nullptr) return std::nullopt;
  auto it = section->find(key);
  if (it == section->end() || it->second.empty()) return std::nullopt;
  return Sourced{it->second, where};
}

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string source;  // empty: none
};

// A key pair from a file section; a section with neither key is no credentials at all.
absl::StatusOr<Credentials> CredentialsFromSection(
    const std::map<std::string, std::string>* section, const std::string& where) {
  Credentials creds;
  std::optional<Sourced> id = FileValue(section, "aws_access_key_id", where);
  std::optional<Sourced> secret = FileValue(section, "aws_secret_access_key", where);
  if (!id.has_value() && !secret.has_value()) return creds;
  if (!id.has_value() || !secret.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has ", id.has_value() ? "aws_access_key_id" : "aws_secret_access_key",
                     " without ", id.has_value() ? "aws_secret_access_key" : "aws_access_key_id",
                     ": set both aws_access_key_id and aws_secret_access_key, or neither"));
  }
  creds.access_key_id = id->value;
  creds.secret_access_key = secret->value;
  if (std::optional<Sourced> token = FileValue(section, "aws_session_token", where)) {
    creds.session_token = token->value;
  }
  creds.source = where;
  return creds;
}

absl::StatusOr<Credentials> ResolveCredentials(const EnvLookup& env, const AwsFile& credentials,
                                               const AwsFile& config, const std::string& profile) {
  std::optional<std::string> id = NonEmpty(env, "AWS_ACCESS_KEY_ID");
  std::optional<std::string> secret = NonEmpty(env, "AWS_SECRET_ACCESS_KEY");
  if (id.has_value() || secret.has_value()) {
    if (!id.has_value() || !secret.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          id.has_value() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY", " is set but ",
          id.has_value() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
          " is not: set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither"));
    }
    Credentials creds;
    creds.access_key_id = *id;
    creds.secret_access_key = *secret;
    creds.session_token = NonEmpty(env, "AWS_SESSION_TOKEN").value_or("");
    creds.source = "AWS_ACCESS_KEY_ID";
    return creds;
  }
  absl::StatusOr<Credentials> from_file = CredentialsFromSection(
      credentials.Find(profile), absl::StrCat(credentials.path, " [", profile, "]"));
  if (!from_file.ok() || !from_file->source.empty()) return from_file;
  const auto [section, name] = ConfigSection(config, profile);
  return CredentialsFromSection(section, absl::StrCat(config.path, " ", name));
}

// "http(s)://host[:port]" with an optional trailing '/', returned without it and with
// the scheme lowercased; anything else (a path, a query, user info) is refused because
// the bucket and key are appended to it.
absl::StatusOr<std::string> ValidateEndpoint(const Sourced& endpoint) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("S3 endpoint \"", endpoint.value, "\" (from ",
                                                   endpoint.source, "): ", why,
                                                   "; expected http(s)://host[:port]"));
  };
  absl::string_view text = endpoint.value;
  const size_t sep = text.find("://");
  if (sep == absl::string_view::npos) return invalid("no scheme");
  const std::string scheme = absl::AsciiStrToLower(text.substr(0, sep));
  if (scheme != "http" && scheme != "https") {
    return invalid(absl::StrCat("scheme \"", text.substr(0, sep), "\" is not http or https"));
  }
  absl::string_view authority = text.substr(sep + 3);
  if (absl::EndsWith(authority, "/")) authority.remove_suffix(1);
  if (authority.find_first_of("/?#") != absl::string_view::npos) {
    return invalid("it has a path or a query");
  }
  if (authority.find('@') != absl::string_view::npos) return invalid("it has user info");
  absl::string_view host = authority;
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {  // an IPv6 literal: [::1]:9000
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return invalid("unclosed '[' in the host");
    host = authority.substr(0, close + 1);
    const absl::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return invalid("text after the host");
      port = after.substr(1);
      if (port.empty()) return invalid("empty port");
    }
  } else if (const size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return invalid("empty port");
  }
  if (host.empty() || host == "[]") return invalid("no host");
  if (std::any_of(host.begin(), host.end(), [](char c) {
        return absl::ascii_isspace(static_cast<unsigned char>(c)) ||
               absl::ascii_iscntrl(static_cast<unsigned char>(c));
      })) {
    return invalid("whitespace in the host");
  }
  if (!port.empty()) {
    uint32_t number = 0;
    if (!std::all_of(port.begin(), port.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
        !absl::SimpleAtoi(port, &number) || number == 0 || number > 65535) {
      return invalid(absl::StrCat("port \"", port, "\" is not 1 to 65535"));
    }
  }
  return absl::StrCat(scheme, "://", authority);
}

// Region names go into the default endpoint's host name.
absl::Status ValidateRegion(const Sourced& region) {
  const bool ok = std::all_of(region.value.begin(), region.value.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-';
  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("S3 region \"", region.value, "\" (from ", region.source,
                   ") is not a region name (letters, digits and '-', e.g. us-east-1)"));
}

// Endpoints on amazonaws.com are AWS's own, where virtual-hosted style is the default
// (and the only style for buckets created since 2020).
bool IsAwsEndpoint(absl::string_view endpoint) {
  absl::string_view host = endpoint.substr(endpoint.find("://") + 3);
  host = host.substr(0, host.rfind(':') == absl::string_view::npos ? host.size() : host.rfind(':'));
  return absl::EndsWithIgnoreCase(host, ".amazonaws.com");
}

// Virtual-hosted style puts the bucket in a host name, which only a DNS-compatible
// name fits; with TLS a dot would also break the wildcard certificate. The AWS SDKs
// fall back to path style for such buckets, and so does this.
bool FitsHostName(absl::string_view bucket, bool https) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  if (https && absl::StrContains(bucket, '.')) return false;
  return std::all_of(bucket.begin(), bucket.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  });
}

// SigV4's URI encoding for S3: unreserved bytes and '/' stay, all else is %XX.
std::string EncodeKey(absl::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (const char c : key) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", u);
    }
  }
  return out;
}

}  // namespace

std::string S3Settings::ObjectUrl(const std::string& bucket, const std::string& key) const {
  return absl::StrCat(BucketUrl(bucket), EncodeKey(key));
}

std::string S3Settings::BucketUrl(const std::string& bucket) const {
  const size_t sep = endpoint.find("://");
  const absl::string_view scheme = absl::string_view(endpoint).substr(0, sep);
  if (path_style || sep == std::string::npos || !FitsHostName(bucket, scheme == "https")) {
    return absl::StrCat(endpoint, "/", EncodeKey(bucket), "/");
  }
  return absl::StrCat(scheme, "://", bucket, ".", absl::string_view(endpoint).substr(sep + 3), "/");
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<S3Settings> ResolveS3Settings(const S3Flags& flags, const EnvLookup& env) {
  const auto flag_value = [](const std::optional<std::string>& flag,
                             const char* name) -> absl::StatusOr<std::optional<Sourced>> {
    if (!flag.has_value()) return std::nullopt;
    if (flag->empty()) return absl::InvalidArgumentError(absl::StrCat(name, " is empty"));
    return std::optional<Sourced>(Sourced{*flag, name});
  };
  const auto env_value = [&env](const char* name) -> std::optional<Sourced> {
    std::optional<std::string> value = NonEmpty(env, name);
    if (!value.has_value()) return std::nullopt;
    return Sourced{*value, name};
  };

  absl::StatusOr<std::optional<Sourced>> profile_flag = flag_value(flags.profile, "--s3-profile");
  if (!profile_flag.ok()) return profile_flag.status();
  std::optional<Sourced> named_profile =
      profile_flag->has_value() ? **profile_flag : env_value("AWS_PROFILE");
  const std::string profile = named_profile.has_value() ? named_profile->value : "default";

  absl::StatusOr<AwsFile> credentials =
      LoadAwsFile(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<AwsFile> config = LoadAwsFile(env, "AWS_CONFIG_FILE", ".aws/config");
  if (!config.ok()) return config.status();
  const auto [config_section, config_section_name] = ConfigSection(*config, profile);
  const std::string config_where = absl::StrCat(config->path, " ", config_section_name);

  // A profile asked for by name that no file has is a typo, not a request for the
  // defaults (the AWS CLI refuses it too); "default" may be absent, as it is implied.
  if (named_profile.has_value() && profile != "default" && credentials->Find(profile) == nullptr &&
      config_section == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 profile \"", profile, "\" (from ", named_profile->source, ") is in neither ",
        credentials->path.empty() ? "the credentials file (no HOME)" : credentials->path, " nor ",
        config->path.empty() ? "the config file (no HOME)" : config->path));
  }

  S3Settings settings;
  absl::StatusOr<Credentials> creds = ResolveCredentials(env, *credentials, *config, profile);
  if (!creds.ok()) return creds.status();
  settings.access_key_id = creds->access_key_id;
  settings.secret_access_key = creds->secret_access_key;
  settings.session_token = creds->session_token;

  absl::StatusOr<std::optional<Sourced>> region_flag = flag_value(flags.region, "--s3-region");
  if (!region_flag.ok()) return region_flag.status();
  std::optional<Sourced> region = *region_flag;
  if (!region.has_value()) region = env_value("AWS_REGION");
  if (!region.has_value()) region = env_value("AWS_DEFAULT_REGION");
  if (!region.has_value()) region = FileValue(config_section, "region", config_where);
  if (region.has_value()) {
    if (absl::Status s = ValidateRegion(*region); !s.ok()) return s;
    settings.region = region->value;
  }

  absl::StatusOr<std::optional<Sourced>> endpoint_flag =
      flag_value(flags.endpoint, "--s3-endpoint");
  if (!endpoint_flag.ok()) return endpoint_flag.status();
  std::optional<Sourced> endpoint = *endpoint_flag;
  if (!endpoint.has_value()) endpoint = env_value("AWS_ENDPOINT_URL_S3");
  if (!endpoint.has_value()) endpoint = env_value("AWS_ENDPOINT_URL");
  if (!endpoint.has_value()) endpoint = FileValue(config_section, "endpoint_url", config_where);
  if (endpoint.has_value()) {
    absl::StatusOr<std::string> valid = ValidateEndpoint(*endpoint);
    if (!valid.ok()) return valid.status();
    settings.endpoint = *std::move(valid);
  } else {
    settings.endpoint = absl::StrCat("https://s3.", settings.region, ".amazonaws.com");
  }

  settings.path_style = flags.path_style.has_value()
                            ? *flags.path_style
                            : endpoint.has_value() && !IsAwsEndpoint(settings.endpoint);

  std::string described =
      creds->source.empty()
          ? "no credentials (unsigned requests)"
          : absl::StrCat("credentials from ", creds->source,
                         settings.session_token.empty() ? "" : " (with session token)");
  absl::StrAppend(&described, "; region ", settings.region, " from ",
                  region.has_value() ? region->source : "the default");
  absl::StrAppend(&described, "; endpoint ", settings.endpoint, " from ",
                  endpoint.has_value() ? endpoint->source : "the region",
                  settings.path_style ? ", path-style" : ", virtual-hosted",
                  flags.path_style.has_value() ? " (--s3-path-style)" : "");
  if (named_profile.has_value()) {
    absl::StrAppend(&described, "; profile ", profile, " from ", named_profile->source);
  }
  settings.described_source = std::move(described);
  return settings;
}

}  // namespace shardcast::remote

#include "tests/support/object_servers.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "tests/support/child_process.h"
#include "tests/support/free_port.h"
#include "tests/support/temp_dir.h"

#ifndef SHARDCAST_SOURCE_DIR
#error "SHARDCAST_SOURCE_DIR: the source tree, for tools/fault_proxy.py"
#endif
#ifndef SHARDCAST_TEST_TOOLS_DIR
#error "SHARDCAST_TEST_TOOLS_DIR: where tools/setup-test-servers.sh installs s3rver"
#endif

namespace shardcast::testing_util {
namespace {

constexpr char kSetupScript[] = "tools/setup-test-servers.sh";
// How long a server may take to answer on its port: node loads s3rver in about a
// second on an idle machine; the rest is for a loaded CI machine.
constexpr auto kStartDeadline = std::chrono::seconds(10);
// A port picked free may be taken again before the server binds it: retried.
constexpr int kStartAttempts = 3;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? std::string(value) : fallback;
}

std::string NginxPath() { return EnvOr("SHARDCAST_NGINX", "/usr/sbin/nginx"); }

std::string S3rverPath() {
  return EnvOr("SHARDCAST_S3RVER", EnvOr("SHARDCAST_TEST_TOOLS", SHARDCAST_TEST_TOOLS_DIR) +
                                       "/node_modules/.bin/s3rver");
}

absl::Status NeedProgram(const std::string& path, const std::string& what) {
  if (access(path.c_str(), X_OK) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, " not found at ", path, ": run ",
                                                    kSetupScript, " (the remote tests' servers)"));
}

// The last `max` bytes of the file (what a failed start says about itself).
std::string Tail(const std::string& path, size_t max = 2000) {
  std::string text = ReadWholeFile(path);
  if (text.size() > max) text = "..." + text.substr(text.size() - max);
  return text;
}

bool PortAnswers(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// What the child wrote on stdout and stderr, last lines first of each.
std::string Logs(const std::string& log) {
  return absl::StrCat("stdout:\n", Tail(log + ".out"), "\nstderr:\n", Tail(log + ".err"));
}

// Starts `argv_for(port)` on a free port, its stdout and stderr in `log`.out and .err,
// and waits until the port accepts connections. A child that exits first (the port was
// taken under it, say) is started again on another port.
absl::Status StartOnFreePort(const std::string& name,
                             const std::function<std::vector<std::string>(int)>& argv_for,
                             const std::function<absl::Status(int)>& prepare,
                             const std::string& log, std::unique_ptr<ChildProcess>& process,
                             int& port) {
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    port = FreePort();
    if (absl::Status s = prepare(port); !s.ok()) return s;
    process = std::make_unique<ChildProcess>();
    if (absl::Status s = process->Start(argv_for(port), log + ".out", log + ".err"); !s.ok()) {
      return s;
    }
    const auto deadline = std::chrono::steady_clock::now() + kStartDeadline;
    while (true) {
      const bool answers = PortAnswers(port);
      // Checked after the port answers too: what answered may be another process that
      // took the port first, while ours failed to bind it and exited.
      if (auto exited = process->WaitFor(std::chrono::milliseconds(0)); exited.has_value()) {
        last = absl::UnavailableError(absl::StrCat(name, " exited (wait status ", *exited,
                                                   ") before answering on port ", port, "; ",
                                                   Logs(log)));
        break;
      }
      if (answers) return absl::OkStatus();
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(name, " did not answer on port ", port,
                                                        " within ", kStartDeadline.count(), " s; ",
                                                        Logs(log)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return last;
}

// ---- HTTP, for the setup calls (buckets, objects, the proxy's control endpoint) ----

struct HttpReply {
  long status = 0;
  std::string body;
};

size_t AppendBody(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

absl::StatusOr<HttpReply> Http(const std::string& method, const std::string& url,
                               const std::string& body, const std::string& content_type) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_slist* headers = nullptr;
  // No "Expect: 100-continue" round trip before a body; a real type instead of the
  // form type that CURLOPT_POSTFIELDS implies (s3rver stores it with the object).
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
  HttpReply reply;
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "PUT" || method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", url, ": ", *error != '\0' ? error : curl_easy_strerror(rc)));
  }
  if (reply.status < 200 || reply.status > 299) {
    return absl::InternalError(
        absl::StrCat(method, " ", url, ": HTTP ", reply.status, ": ", reply.body.substr(0, 500)));
  }
  return reply;
}

// An S3 key (or bucket) as a URL path: every byte but the unreserved ones and '/'
// percent-encoded, as AWS encodes a path for signing, so that a signed request's path
// needs no other form.
std::string EncodeKey(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

// A JSON string literal (control requests carry match strings and credentials).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Loopback(int port) { return absl::StrCat("http://127.0.0.1:", port); }

}  // namespace

// ---- NginxServer ----

NginxServer::NginxServer() = default;

NginxServer::~NginxServer() {
  process_.reset();  // stopped (SIGTERM, then SIGKILL) and reaped before its prefix goes
  prefix_.reset();
}

absl::StatusOr<std::unique_ptr<NginxServer>> NginxServer::Start(const std::string& dir) {
  return StartWithBasicAuth(dir, "", "");
}

absl::StatusOr<std::unique_ptr<NginxServer>> NginxServer::StartWithBasicAuth(
    const std::string& dir, const std::string& user, const std::string& password) {
  const std::string nginx = NginxPath();
  if (absl::Status s = NeedProgram(nginx, "nginx"); !s.ok()) return s;
  std::error_code ec;
  const std::string root = std::filesystem::absolute(dir, ec).string();
  if (ec || !std::filesystem::is_directory(root)) {
    return absl::InvalidArgumentError(absl::StrCat("NginxServer: not a directory: ", dir));
  }
  auto server = std::unique_ptr<NginxServer>(new NginxServer());
  server->prefix_ = std::make_unique<TempDir>("shardcast_nginx");
  const std::string prefix = server->prefix_->path();
  const std::string conf = prefix + "/nginx.conf";
  const std::string log = prefix + "/error.log";
  const auto quoted = [](const std::string& s) {
    return "\"" + absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}}) + "\"";
  };
  // nginx reads "{PLAIN}" passwords as they are written.
  const std::string htpasswd = prefix + "/htpasswd";
  if (!user.empty()) {
    std::ofstream out(htpasswd, std::ios::trunc);
    out << user << ":{PLAIN}" << password << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", htpasswd));
  }
  const std::string location = user.empty()
                                   ? "    location / { }\n"
                                   : absl::StrCat(
                                         "    location / {\n      auth_basic \"shardcast\";\n"
                                         "      auth_basic_user_file ",
                                         quoted(htpasswd), ";\n    }\n");
  const auto write_conf = [&](int port) -> absl::Status {
    // One process in the foreground (no master, no daemon): SIGTERM stops all of it
    // and nothing outlives the test. Every path the process writes is in the prefix,
    // so it runs as any user; as root it stays root (no `user`: that needs a master),
    // which reads any test directory.
    std::ofstream out(conf, std::ios::trunc);
    out << "daemon off;\n"
        << "master_process off;\n"
        << "worker_processes 1;\n"
        << "pid " << quoted(prefix + "/nginx.pid") << ";\n"
        << "error_log " << quoted(log) << " warn;\n"
        << "events { worker_connections 1024; }\n"
        << "http {\n"
        << "  access_log off;\n"
        << "  client_body_temp_path " << quoted(prefix + "/client_body") << ";\n"
        << "  proxy_temp_path " << quoted(prefix + "/proxy") << ";\n"
        << "  fastcgi_temp_path " << quoted(prefix + "/fastcgi") << ";\n"
        << "  uwsgi_temp_path " << quoted(prefix + "/uwsgi") << ";\n"
        << "  scgi_temp_path " << quoted(prefix + "/scgi") << ";\n"
        << "  default_type application/octet-stream;\n"
        << "  sendfile on;\n"
        << "  tcp_nopush on;\n"
        << "  keepalive_timeout 60s;\n"
        << "  keepalive_requests 100000;\n"
        << "  server {\n"
        << "    listen 127.0.0.1:" << port << ";\n"
        << "    root " << quoted(root) << ";\n"
        << location << "  }\n"
        << "}\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", conf));
    return absl::OkStatus();
  };
  // -e: the log from the start, before nginx has read its configuration (it would
  // otherwise try its built-in path first).
  const auto argv = [&](int) {
    return std::vector<std::string>{nginx, "-p", prefix, "-c", conf, "-e", log};
  };
  if (absl::Status s = StartOnFreePort("nginx", argv, write_conf, prefix + "/nginx",
                                       server->process_, server->port_);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(s.message(), "\nerror.log:\n", Tail(log)));
  }
  return server;
}

std::string NginxServer::url() const { return Loopback(port_); }
int NginxServer::port() const { return port_; }

// ---- S3rverServer ----

S3rverServer::S3rverServer() = default;

S3rverServer::~S3rverServer() {
  process_.reset();
  data_.reset();
}

absl::StatusOr<std::unique_ptr<S3rverServer>> S3rverServer::Start() {
  const std::string s3rver = S3rverPath();
  if (absl::Status s = NeedProgram(s3rver, "s3rver"); !s.ok()) return s;
  auto server = std::unique_ptr<S3rverServer>(new S3rverServer());
  server->data_ = std::make_unique<TempDir>("shardcast_s3rver");
  const std::string buckets = server->data_->path() + "/buckets";
  std::error_code ec;
  std::filesystem::create_directory(buckets, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", buckets));
  // The log is outside `buckets`: s3rver takes every folder there for a bucket.
  const std::string log = server->data_->path() + "/s3rver";
  // s3rver makes ListObjectsV2 continuation tokens with DES, which Node 17+ (OpenSSL 3)
  // has only from the legacy provider: without it every truncated page is a 500. The
  // child inherits the environment.
  ::setenv("NODE_OPTIONS", "--openssl-legacy-provider", /*overwrite=*/0);
  const auto argv = [&](int port) {
    return std::vector<std::string>{
        s3rver,      "--directory", buckets,   "--port", std::to_string(port),
        "--address", "127.0.0.1",   "--silent"};
  };
  if (absl::Status s = StartOnFreePort(
          "s3rver", argv, [](int) { return absl::OkStatus(); }, log, server->process_,
          server->port_);
      !s.ok()) {
    return s;
  }
  return server;
}

std::string S3rverServer::endpoint() const { return Loopback(port_); }

absl::Status S3rverServer::CreateBucket(const std::string& bucket) {
  return Http("PUT", endpoint() + "/" + EncodeKey(bucket), "", "application/octet-stream").status();
}

absl::Status S3rverServer::Put(const std::string& bucket, const std::string& key,
                               const std::string& bytes) {
  return Http("PUT", endpoint() + "/" + EncodeKey(bucket) + "/" + EncodeKey(key), bytes,
              "application/octet-stream")
      .status();
}

absl::Status S3rverServer::PutDirectory(const std::string& bucket, const std::string& prefix,
                                        const std::string& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", file.string()));
    if (absl::Status s =
            Put(bucket, prefix + file.filename().string(), ReadWholeFile(file.string()));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// ---- FaultProxy ----

FaultProxy::FaultProxy() = default;

FaultProxy::~FaultProxy() {
  process_.reset();
  dir_.reset();
}

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& upstream) {
  const std::string python = "/usr/bin/python3";  // Debian's, as the script's #! says
  const std::string script = std::string(SHARDCAST_SOURCE_DIR) + "/tools/fault_proxy.py";
  if (absl::Status s = NeedProgram(python, "python3"); !s.ok()) return s;
  if (access(script.c_str(), R_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("fault proxy not found at ", script));
  }
  auto proxy = std::unique_ptr<FaultProxy>(new FaultProxy());
  proxy->dir_ = std::make_unique<TempDir>("shardcast_fault_proxy");
  const auto argv = [&](int port) {
    // -u: the log lines come as they are written, so a failing test sees them all.
    return std::vector<std::string>{
        python, "-u", script, "--listen", absl::StrCat("127.0.0.1:", port), "--upstream", upstream};
  };
  const std::string log = proxy->dir_->path() + "/fault_proxy";
  if (absl::Status s = StartOnFreePort(
          "tools/fault_proxy.py", argv, [](int) { return absl::OkStatus(); }, log, proxy->process_,
          proxy->port_);
      !s.ok()) {
    return s;
  }
  return proxy;
}

std::string FaultProxy::url() const { return Loopback(port_); }

absl::Status FaultProxy::Control(const std::string& action, const std::string& json) const {
  return Http("POST", url() + "/__proxy/" + action, json, "application/json").status();
}

absl::Status FaultProxy::CutBody(const std::string& match, int64_t after_bytes, int count) {
  return Control("faults", absl::StrFormat(R"({"kind": "cut", "match": %s, "count": %d, )"
                                           R"("after_bytes": %d})",
                                           JsonString(match), count, after_bytes));
}

absl::Status FaultProxy::FailWith(const std::string& match, int status, int retry_after_seconds,
                                  int count) {
  return Control("faults", absl::StrFormat(R"({"kind": "fail", "match": %s, "count": %d, )"
                                           R"("status": %d, "retry_after": %d})",
                                           JsonString(match), count, status, retry_after_seconds));
}

absl::Status FaultProxy::Trickle(const std::string& match, int64_t bytes_per_second, int count) {
  return Control("faults", absl::StrFormat(R"({"kind": "trickle", "match": %s, "count": %d, )"
                                           R"("bytes_per_second": %d})",
                                           JsonString(match), count, bytes_per_second));
}

absl::Status FaultProxy::Delay(int milliseconds) {
  return Control("delay", absl::StrFormat(R"({"ms": %d})", milliseconds));
}

absl::Status FaultProxy::VerifySigV4(const std::string& access_key_id,
                                     const std::string& secret_access_key) {
  if (access_key_id.empty()) return Control("sigv4", "{}");
  return Control("sigv4",
                 absl::StrFormat(R"({"access_key_id": %s, "secret_access_key": %s})",
                                 JsonString(access_key_id), JsonString(secret_access_key)));
}

absl::Status FaultProxy::Arm(const std::string& fault_json) {
  return Control("faults", fault_json);
}

absl::Status FaultProxy::ClearFaults() { return Control("clear", "{}"); }

absl::StatusOr<int64_t> FaultProxy::Count(const std::string& kind) const {
  absl::StatusOr<HttpReply> reply = Http("GET", url() + "/__proxy/counts", "", "application/json");
  if (!reply.ok()) return reply.status();
  // A flat object of integers ({"requests": 3, "cut": 1, ...}): the number after
  // "kind": is all that is needed, no JSON library.
  const std::string needle = JsonString(kind) + ": ";
  const size_t at = reply->body.find(needle);
  if (at == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("no count \"", kind, "\" in ", reply->body));
  }
  const size_t start = at + needle.size();
  const size_t end = reply->body.find_first_of(",}", start);
  int64_t value = 0;
  if (!absl::SimpleAtoi(reply->body.substr(start, end - start), &value)) {
    return absl::InternalError(absl::StrCat("bad counts reply: ", reply->body));
  }
  return value;
}

}  // namespace shardcast::testing_util

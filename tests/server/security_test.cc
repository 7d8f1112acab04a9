// TLS, mutual TLS and bearer tokens over real gRPC on loopback, with certificates
// made in the test by Debian's openssl CLI: a CA, a server certificate for
// localhost/127.0.0.1 signed by it, a client certificate signed by it, and an
// unrelated second CA. The token reload runs against the real shardcast-server
// process (SIGHUP); shardcast-ctl is run as a child process too.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/rpc/channel.h"
#include "client/rpc/client_security.h"
#include "client/stream/rank_stream.h"
#include "common/util/token_file.h"
#include "google/protobuf/descriptor.h"
#include "server/net/token_authenticator.h"
#include "server/rpc/server_credentials.h"
#include "tests/server/server_test_support.h"
#include "tests/support/child_process.h"

namespace shardcast::server_testing {
namespace {

using testing_util::ReadWholeFile;
using testing_util::RunShell;
using testing_util::RunShellCapture;
using testing_util::ShellQuote;

constexpr char kGoodToken[] = "s3cret-token-for-rank-0";
constexpr char kNewToken[] = "rotated-token-2";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Runs openssl with `args` in `dir`; its output goes to dir/openssl.log.
void OpenSsl(const std::string& dir, const std::string& args) {
  const std::string command =
      absl::StrCat("cd ", ShellQuote(dir), " && openssl ", args, " >>openssl.log 2>&1");
  ASSERT_EQ(RunShell(command), 0) << command << "\n" << ReadWholeFile(dir + "/openssl.log");
}

// A self-signed CA `name`.pem / `name`.key (EC P-256: quick to make).
void MakeCa(const std::string& dir, const std::string& name) {
  OpenSsl(dir,
          absl::StrCat("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                       "-keyout ",
                       name, ".key -out ", name, ".pem -days 2 -subj '/CN=", name, " test CA'"));
}

// `name`.pem / `name`.key signed by `ca`, with the extensions in `ext`.
void MakeLeaf(const std::string& dir, const std::string& name, const std::string& ca,
              const std::string& ext) {
  WriteFile(absl::StrCat(dir, "/", name, ".ext"), ext);
  OpenSsl(dir, absl::StrCat("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ",
                            name, ".key -out ", name, ".csr -subj '/CN=", name, "'"));
  OpenSsl(dir,
          absl::StrCat("x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                       ".key -CAcreateserial -out ", name, ".pem -days 2 -extfile ", name, ".ext"));
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("security_test");
    const std::string& d = dir_->path();
    MakeCa(d, "ca");
    MakeCa(d, "other_ca");
    MakeLeaf(d, "server", "ca",
             "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    MakeLeaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n");
    WriteFile(d + "/tokens", absl::StrCat("# trainers\n\n", kGoodToken, "\n  other-token  \n"));
    fs::create_directories(d + "/shards");
    MakeDataset(d + "/shards", /*samples=*/24, /*per_shard=*/8);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::string Path(const std::string& name) { return (*dir_) / name; }

  static server::ServerOptions TlsOptions(bool client_ca = false) {
    server::ServerOptions options;
    options.tls_cert_file = Path("server.pem");
    options.tls_key_file = Path("server.key");
    if (client_ca) options.tls_client_ca_file = Path("ca.pem");
    return options;
  }

  static server::ServerOptions TokenOptions() {
    server::ServerOptions options;
    options.auth_token_file = Path("tokens");
    return options;
  }

  // A channel to `server` (dialed as localhost, the certificate's name) made by the
  // clients' factory from the security flags.
  static std::shared_ptr<grpc::Channel> Channel(int port,
                                                const client::ClientSecurityFlags& flags) {
    absl::StatusOr<client::ClientSecurity> security = client::LoadClientSecurity(flags);
    EXPECT_TRUE(security.ok()) << security.status();
    client::ChannelOptions options;
    options.target = absl::StrCat("localhost:", port);
    if (security.ok()) {
      options.credentials = security->credentials;
      options.bearer_token = security->bearer_token;
    }
    return client::MakeChannel(options);
  }

  static client::ClientSecurityFlags Ca(const std::string& ca = "ca.pem") {
    client::ClientSecurityFlags flags;
    flags.tls_ca = Path(ca);
    return flags;
  }

  // RankStream::Connect with a long reconnect deadline: a refusal that were retried
  // like an outage would end as "unreachable for 300.0 s", not with the refusal. A peer
  // closing the connection during the handshake is given 2 s (default 10 s).
  static absl::Status ConnectRankStream(int port, const client::ClientSecurityFlags& flags) {
    absl::StatusOr<client::ClientSecurity> security = client::LoadClientSecurity(flags);
    if (!security.ok()) return security.status();
    client::RankStreamOptions options;
    options.server = absl::StrCat("localhost:", port);
    options.credentials = security->credentials;
    options.bearer_token = security->bearer_token;
    options.job = MakeRegister("rank-stream-job", 0, 1, 4);
    options.reconnect_deadline_seconds = 300;
    options.handshake_refusal_seconds = 2;
    absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
        client::RankStream::Connect(options);
    return stream.status();
  }

  // Register, one full stream and GetStatus over `channel`: OK, or the first failure.
  static grpc::Status Exercise(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& job) {
    auto stub = v1::Shardcast::NewStub(channel);
    v1::RegisterResponse registered;
    grpc::Status status = Register(stub.get(), MakeRegister(job, 0, 1, 4), &registered);
    if (!status.ok()) return status;
    v1::StreamBatchesRequest request;
    request.set_job_id(job);
    request.set_job_fingerprint(registered.job_fingerprint());
    StreamResult streamed = StreamAll(stub.get(), request);
    if (!streamed.status.ok()) return streamed.status;
    if (static_cast<int64_t>(streamed.batches.size()) != registered.batches_per_epoch()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "short stream");
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GetStatusResponse response;
    return stub->GetStatus(&context, v1::GetStatusRequest(), &response);
  }

  static TempDir* dir_;
};

TempDir* SecurityTest::dir_ = nullptr;

TEST_F(SecurityTest, TlsServesRegisterStreamAndStatus) {
  InProcessServer server(Path("shards"), TlsOptions());
  auto channel = Channel(server.server().port(), Ca());
  grpc::Status status = Exercise(channel, "tls-job");
  EXPECT_TRUE(status.ok()) << client::DescribeRpcError(status);
  EXPECT_EQ(Health(channel), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(ConnectRankStream(server.server().port(), Ca()).ok());
}

TEST_F(SecurityTest, PlaintextClientIsRefusedByTlsServer) {
  InProcessServer server(Path("shards"), TlsOptions());
  grpc::Status status = Exercise(Channel(server.server().port(), {}), "plain-job");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(client::DescribeRpcError(status).find("--tls-ca"), std::string::npos)
      << client::DescribeRpcError(status);
  absl::Status connected = ConnectRankStream(server.server().port(), {});
  EXPECT_TRUE(absl::IsUnavailable(connected)) << connected;
  EXPECT_NE(connected.message().find("closed it during the handshake"), std::string::npos)
      << connected;
  EXPECT_EQ(connected.message().find("unreachable for"), std::string::npos) << connected;
}

// --health-listen: probes that speak neither TLS nor tokens (Kubernetes' grpc probes)
// get the health answers in plaintext on their own port, and nothing else there.
TEST_F(SecurityTest, TheHealthListenerAnswersHealthInPlaintextAndNothingElse) {
  server::ServerOptions options = TlsOptions();
  options.auth_token_file = Path("tokens");
  options.health_listen_address = "127.0.0.1:0";
  InProcessServer server(Path("shards"), options);
  ASSERT_GT(server.server().health_port(), 0);
  auto probe = Channel(server.server().health_port(), {});
  EXPECT_EQ(Health(probe), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(probe, "shardcast.v1.Shardcast"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  grpc::Status status = Exercise(probe, "probe-job");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  // It follows the main listener's answers: NOT_SERVING once the server drains.
  server.server().Shutdown();
  EXPECT_NE(Health(probe), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(SecurityTest, TlsClientIsRefusedByPlaintextServer) {
  InProcessServer server(Path("shards"), {});
  grpc::Status status = Exercise(Channel(server.server().port(), Ca()), "mismatch-job");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_TRUE(client::IsHandshakeFailure(client::FromGrpc(status))) << status.error_message();
  absl::Status connected = ConnectRankStream(server.server().port(), Ca());
  EXPECT_TRUE(absl::IsUnavailable(connected)) << connected;
  EXPECT_NE(connected.message().find("TLS handshake failed"), std::string::npos) << connected;
}

TEST_F(SecurityTest, WrongCaIsRefusedWithAHintAndNotRetried) {
  InProcessServer server(Path("shards"), TlsOptions());
  grpc::Status status = Exercise(Channel(server.server().port(), Ca("other_ca.pem")), "ca-job");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_TRUE(client::IsHandshakeFailure(client::FromGrpc(status))) << status.error_message();
  EXPECT_NE(client::DescribeRpcError(status).find("--tls-ca"), std::string::npos);

  absl::Status connected = ConnectRankStream(server.server().port(), Ca("other_ca.pem"));
  EXPECT_TRUE(absl::IsUnavailable(connected)) << connected;
  EXPECT_NE(connected.message().find("TLS handshake failed"), std::string::npos) << connected;
  EXPECT_EQ(connected.message().find("unreachable for"), std::string::npos) << connected;
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificateSignedByTheCa) {
  InProcessServer server(Path("shards"), TlsOptions(/*client_ca=*/true));
  const int port = server.server().port();

  grpc::Status without = Exercise(Channel(port, Ca()), "mtls-none");
  EXPECT_EQ(without.error_code(), grpc::StatusCode::UNAVAILABLE) << without.error_message();
  absl::Status connected = ConnectRankStream(port, Ca());
  EXPECT_TRUE(absl::IsUnavailable(connected)) << connected;
  EXPECT_NE(connected.message().find("--tls-cert/--tls-key"), std::string::npos) << connected;
  EXPECT_EQ(connected.message().find("unreachable for"), std::string::npos) << connected;

  // A certificate the server's client CA did not sign: refused as well.
  client::ClientSecurityFlags foreign = Ca();
  foreign.tls_cert = Path("other_ca.pem");
  foreign.tls_key = Path("other_ca.key");
  grpc::Status untrusted = Exercise(Channel(port, foreign), "mtls-foreign");
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE) << untrusted.error_message();

  client::ClientSecurityFlags with = Ca();
  with.tls_cert = Path("client.pem");
  with.tls_key = Path("client.key");
  grpc::Status status = Exercise(Channel(port, with), "mtls-job");
  EXPECT_TRUE(status.ok()) << client::DescribeRpcError(status);
}

TEST_F(SecurityTest, MissingOrWrongTokenIsUnauthenticatedOnEveryShardcastCall) {
  InProcessServer server(Path("shards"), TokenOptions());
  const int port = server.server().port();
  client::ClientSecurityFlags wrong_file;
  WriteFile(Path("wrong_token"), "not-the-token\n");
  wrong_file.auth_token_file = Path("wrong_token");

  for (const client::ClientSecurityFlags& flags : {client::ClientSecurityFlags{}, wrong_file}) {
    SCOPED_TRACE(flags.auth_token_file.empty() ? "no token" : "wrong token");
    auto stub = v1::Shardcast::NewStub(Channel(port, flags));
    v1::RegisterResponse registered;
    grpc::Status status = Register(stub.get(), MakeRegister("token-job", 0, 1, 4), &registered);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
    EXPECT_NE(client::DescribeRpcError(status).find("SHARDCAST_TOKEN"), std::string::npos);

    StreamResult streamed = StreamAll(stub.get(), "token-job", 0, 0, 0);
    EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << streamed.status.error_message();
    EXPECT_TRUE(streamed.batches.empty());

    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GetStatusResponse response;
    status = stub->GetStatus(&context, v1::GetStatusRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
    EXPECT_EQ(response.jobs_size(), 0);

    // A refused token is not an outage: RankStream reports it at once.
    absl::Status connected = ConnectRankStream(port, flags);
    EXPECT_TRUE(absl::IsUnauthenticated(connected)) << connected;

    // Health stays open, so probes need no token.
    EXPECT_EQ(Health(Channel(port, flags)), grpc::health::v1::HealthCheckResponse::SERVING);
  }

  // A token written "bearer" in lower case and with surrounding blanks is still taken.
  auto stub = v1::Shardcast::NewStub(Channel(port, {}));
  grpc::ClientContext context;
  context.AddMetadata("authorization", absl::StrCat("bearer ", kGoodToken));
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetStatusResponse response;
  grpc::Status lower = stub->GetStatus(&context, v1::GetStatusRequest(), &response);
  EXPECT_TRUE(lower.ok()) << lower.error_message();
}

// Calls `method` (e.g. "/shardcast.v1.Shardcast/GetStatus") with one empty request
// message, whatever its kind, and `authorization` metadata unless it is empty; reads
// whatever comes back and returns the call's status. An empty message is a valid
// default request of every method, so a method that skipped the token check would
// answer something other than UNAUTHENTICATED.
grpc::Status CallGenerically(const std::shared_ptr<grpc::Channel>& channel,
                             const std::string& method, const std::string& authorization) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  // One operation at a time, each waited for; a failed one (the server already
  // finished) only ends the reading.
  void* tag = nullptr;
  bool ok = false;
  auto wait = [&cq, &tag, &ok] { return cq.Next(&tag, &ok) && ok; };
  call->StartCall(reinterpret_cast<void*>(1));
  wait();
  grpc::Slice nothing("");
  call->WriteLast(grpc::ByteBuffer(&nothing, 1), grpc::WriteOptions(), reinterpret_cast<void*>(2));
  wait();
  grpc::ByteBuffer response;
  do {
    call->Read(&response, reinterpret_cast<void*>(3));
  } while (wait());
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  return status;
}

// Walks the service's descriptor rather than a hand-kept list, so that a method added
// to the proto later is held to the token check without touching this test.
TEST_F(SecurityTest, EveryMethodOfTheServiceRefusesAStranger) {
  InProcessServer server(Path("shards"), TokenOptions());
  std::shared_ptr<grpc::Channel> channel = server.channel();
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::Shardcast::service_full_name());
  ASSERT_NE(service, nullptr);
  ASSERT_GT(service->method_count(), 0);
  server::TokenAuthenticator tokens(Path("tokens"));  // the server's own check
  ASSERT_TRUE(tokens.Reload().ok());
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string method =
        absl::StrCat("/", service->full_name(), "/", service->method(i)->name());
    for (const std::string& authorization : {std::string(), std::string("Bearer not-the-token")}) {
      SCOPED_TRACE(
          absl::StrCat(method, authorization.empty() ? " without a token" : " with a wrong token"));
      grpc::Status status = CallGenerically(channel, method, authorization);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
      // The message says what was wrong, as TokenAuthenticator::Check words it.
      EXPECT_EQ(status.error_message(), std::string(tokens.Check(authorization).message()));
    }
    // The good token gets past the check (whatever the method then makes of an empty
    // request), so the refusals above are the check's and not a broken call's.
    grpc::Status accepted = CallGenerically(channel, method, absl::StrCat("Bearer ", kGoodToken));
    EXPECT_NE(accepted.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method << ": " << accepted.error_message();
  }
  // Health is another service and stays open, on purpose: probes carry no token.
  EXPECT_EQ(Health(channel), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(SecurityTest, TokenFromFileOrEnvironmentIsAccepted) {
  InProcessServer server(Path("shards"), TokenOptions());
  const int port = server.server().port();
  client::ClientSecurityFlags from_file;
  from_file.auth_token_file = Path("tokens");  // the first token of the server's own file
  grpc::Status status = Exercise(Channel(port, from_file), "file-token-job");
  EXPECT_TRUE(status.ok()) << client::DescribeRpcError(status);

  ASSERT_EQ(setenv(client::kTokenEnvVar, "other-token", 1), 0);
  status = Exercise(Channel(port, {}), "env-token-job");
  unsetenv(client::kTokenEnvVar);
  EXPECT_TRUE(status.ok()) << client::DescribeRpcError(status);
  EXPECT_TRUE(ConnectRankStream(port, from_file).ok());
}

TEST_F(SecurityTest, TlsAndTokenTogether) {
  server::ServerOptions options = TlsOptions(/*client_ca=*/true);
  options.auth_token_file = Path("tokens");
  InProcessServer server(Path("shards"), options);
  client::ClientSecurityFlags flags = Ca();
  flags.tls_cert = Path("client.pem");
  flags.tls_key = Path("client.key");
  flags.auth_token_file = Path("tokens");
  grpc::Status status = Exercise(Channel(server.server().port(), flags), "tls-token-job");
  EXPECT_TRUE(status.ok()) << client::DescribeRpcError(status);
}

// Without --reflection (ServerOptions::reflection) the reflection service is not there,
// although linking gRPC's reflection library registers it for every server.
TEST_F(SecurityTest, ReflectionIsOffByDefault) {
  InProcessServer server(Path("shards"), {});
  grpc::GenericStub generic(server.channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = generic.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  // An unknown streaming method is answered once the client half-closes.
  call->WritesDone(reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(3)) {
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
}

TEST_F(SecurityTest, BadSecurityFilesAreStartErrorsNamingTheFlag) {
  server::ServerOptions options = TlsOptions();
  options.tls_key_file = Path("missing.key");
  options.shards_dir = Path("shards");
  server::Daemon missing_key(options);
  absl::Status started = missing_key.Start();
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("--tls-key"), std::string::npos) << started;

  server::ServerOptions no_tokens;
  no_tokens.shards_dir = Path("shards");
  WriteFile(Path("empty_tokens"), "# nothing yet\n\n");
  no_tokens.auth_token_file = Path("empty_tokens");
  server::Daemon empty(no_tokens);
  started = empty.Start();
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("holds no token"), std::string::npos) << started;

  client::ClientSecurityFlags half;
  half.tls_cert = Path("client.pem");
  EXPECT_FALSE(client::LoadClientSecurity(half).ok());
}

// Polls `check` until it returns true or 60 s passed (a reload is asynchronous to the
// test: the signal is handled on the server's own thread).
bool Eventually(const std::function<bool()>& check) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    if (check()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST_F(SecurityTest, SighupReloadsTheTokenFileOfARealServer) {
  const std::string tokens = Path("reload_tokens");
  WriteFile(tokens, absl::StrCat(kGoodToken, "\n"));
  const std::string log = Path("reload.log");
  ChildServer server({"--shards", Path("shards"), "--listen", "127.0.0.1:0", "--auth-token-file",
                      tokens, "--tls-cert", Path("server.pem"), "--tls-key", Path("server.key")},
                     log);
  ASSERT_NE(server.port(), 0) << server.first_line() << ReadWholeFile(log);

  auto status_with = [&](const std::string& token) {
    client::ClientSecurityFlags flags = Ca();
    WriteFile(Path("client_token"), token + "\n");
    flags.auth_token_file = Path("client_token");
    auto stub = v1::Shardcast::NewStub(Channel(server.port(), flags));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GetStatusResponse response;
    return stub->GetStatus(&context, v1::GetStatusRequest(), &response).error_code();
  };
  EXPECT_EQ(status_with(kGoodToken), grpc::StatusCode::OK);
  EXPECT_EQ(status_with(kNewToken), grpc::StatusCode::UNAUTHENTICATED);

  // Rotate: the old token goes, the new one comes, on SIGHUP.
  WriteFile(tokens, absl::StrCat("# rotated\n", kNewToken, "\n"));
  ASSERT_EQ(kill(server.pid(), SIGHUP), 0);
  EXPECT_TRUE(Eventually([&] { return status_with(kNewToken) == grpc::StatusCode::OK; }))
      << ReadWholeFile(log);
  EXPECT_EQ(status_with(kGoodToken), grpc::StatusCode::UNAUTHENTICATED);

  // A reload that fails (the file emptied) keeps the tokens in force and says so.
  WriteFile(tokens, "");
  ASSERT_EQ(kill(server.pid(), SIGHUP), 0);
  EXPECT_TRUE(Eventually([&] {
    return ReadWholeFile(log).find("token reload failed") != std::string::npos;
  })) << ReadWholeFile(log);
  EXPECT_EQ(status_with(kNewToken), grpc::StatusCode::OK);
  EXPECT_EQ(ReadWholeFile(log).find(kNewToken), std::string::npos) << "a token was logged";

  // shardcast-ctl with the shared client flags: refused without a token (with the
  // hint), answered with one; health needs none.
  const std::string ctl = std::string(SHARDCAST_BINARY_DIR) + "/client/shardcast-ctl";
  const std::string target = absl::StrCat("localhost:", server.port());
  const std::string tls = absl::StrCat(" --tls-ca ", ShellQuote(Path("ca.pem")));
  testing_util::CommandOutput refused = RunShellCapture(
      absl::StrCat("env -u SHARDCAST_TOKEN ", ctl, " status --server ", target, tls, " 2>&1"));
  EXPECT_EQ(refused.exit_code, 3) << refused.out;
  EXPECT_NE(refused.out.find("UNAUTHENTICATED"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("SHARDCAST_TOKEN"), std::string::npos) << refused.out;
  testing_util::CommandOutput answered = RunShellCapture(absl::StrCat(
      "SHARDCAST_TOKEN=", kNewToken, " ", ctl, " status --json --server ", target, tls, " 2>&1"));
  EXPECT_EQ(answered.exit_code, 0) << answered.out;
  testing_util::CommandOutput health = RunShellCapture(
      absl::StrCat("env -u SHARDCAST_TOKEN ", ctl, " health --server ", target, tls, " 2>&1"));
  EXPECT_EQ(health.exit_code, 0) << health.out;
  testing_util::CommandOutput wrong_ca = RunShellCapture(absl::StrCat(
      ctl, " health --server ", target, " --tls-ca ", ShellQuote(Path("other_ca.pem")), " 2>&1"));
  EXPECT_EQ(wrong_ca.exit_code, 3) << wrong_ca.out;
  EXPECT_NE(wrong_ca.out.find("--tls-ca"), std::string::npos) << wrong_ca.out;
}

TEST(TokenFileTest, ParsesOneTokenALineSkippingBlanksAndComments) {
  absl::StatusOr<std::vector<std::string>> tokens = ParseTokens("# c\n\n a \nb\r\n#x\n");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(ParseTokens("two words\n").ok());
  EXPECT_FALSE(ParseTokens("caf\xc3\xa9\n").ok());
}

TEST(TokenAuthenticatorTest, ChecksTheSchemeAndTheToken) {
  TempDir dir;
  WriteFile(dir / "t", "abc\n");
  server::TokenAuthenticator tokens(dir / "t");
  ASSERT_TRUE(tokens.Reload().ok());
  EXPECT_TRUE(tokens.Check("Bearer abc").ok());
  EXPECT_TRUE(absl::IsUnauthenticated(tokens.Check("")));
  EXPECT_TRUE(absl::IsUnauthenticated(tokens.Check("Basic abc")));
  EXPECT_TRUE(absl::IsUnauthenticated(tokens.Check("Bearer ab")));
  EXPECT_TRUE(absl::IsUnauthenticated(tokens.Check("Bearer abcd")));
  // A failed reload keeps what was accepted.
  WriteFile(dir / "t", "");
  EXPECT_FALSE(tokens.Reload().ok());
  EXPECT_TRUE(tokens.Check("Bearer abc").ok());
}

}  // namespace
}  // namespace shardcast::server_testing

// gRPC callback adapter over ServiceCore (see grpc_adapter.h).
#include "server/rpc/grpc_adapter.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/util/url_redaction.h"
#include "google/protobuf/descriptor.h"
#include "server/base/log.h"
#include "server/rpc/batch_encoding.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers. A message may quote a URL (a store's
  // error): what reaches a client never holds its secrets.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), RedactUrlsIn(status.message()));
}

std::string PeerHost(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) return "unix";
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return std::string(peer);
  }
  constexpr size_t kScheme = 5;  // "ipv4:", "ipv6:"
  const size_t port = peer.rfind(':');
  // An IPv6 address holds colons too: the port's colon follows its closing bracket.
  absl::string_view host = peer.substr(0, port);
  const bool bracketed = absl::EndsWith(host, "]") || absl::EndsWith(host, "%5D");
  if (port < kScheme || (absl::StartsWith(peer, "ipv6:") && !bracketed)) {
    return std::string(peer);  // no port after all
  }
  return absl::StrReplaceAll(host, {{"%5B", "["}, {"%5D", "]"}});
}

namespace {

// Writes one stream's batches: one write in flight; the next batch is written from
// OnWriteDone, or from the window's ready callback when it was not assembled yet.
// Reactions never block. Deletes itself in OnDone.
//
// The stream may wait for memory before it opens (StreamManager::Open): the writer
// starts without a session and gets it, or the refusal, through Opened(), on the
// admission thread. A client that goes away meanwhile withdraws the wait.
//
// The server may end the stream from outside (StreamControl: replaced by a newer
// stream of its rank, or idle): the window is cancelled at once; with no write in
// flight the call finishes with that status, else the call is cancelled (a write
// waiting on a client that does not read would hold the status back forever).
class BatchWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  BatchWriter(grpc::CallbackServerContext* context, StreamManager* streams)
      : context_(context), streams_(streams) {}
  // A refused stream: finishes at once with `error` (later reactions, e.g. OnCancel
  // of a client that went away meanwhile, must not finish it again).
  explicit BatchWriter(const absl::Status& error) {
    {
      absl::MutexLock lock(&mu_);
      finish_called_ = true;
    }
    Finish(ToGrpcStatus(error));
  }

  // The wait for memory, to withdraw when the call ends first. Set once, right after
  // the service returned it (Opened may have run already).
  void WaitingFor(std::shared_ptr<StreamManager::Pending> pending) {
    absl::MutexLock lock(&mu_);
    pending_ = std::move(pending);
  }

  // The stream opened, or was refused: the service's OpenStream callback.
  void Opened(absl::StatusOr<std::unique_ptr<StreamSession>> session) {
    std::unique_ptr<StreamSession> too_late;  // the call ended while it waited
    {
      absl::MutexLock lock(&mu_);
      if (!session.ok()) {
        if (!end_status_.has_value()) end_status_ = session.status();
      } else if (finish_called_) {
        too_late = *std::move(session);
      } else {
        session_ = *std::move(session);
      }
    }
    if (too_late != nullptr) {
      too_late->Close("cancelled (client disconnect or server shutdown) before it opened");
      return;
    }
    StreamSession* opened = session_unlocked();
    if (opened != nullptr) {
      std::optional<absl::Status> ended =
          opened->Attach([this](const absl::Status& status) { End(status); });
      if (ended.has_value()) {
        absl::MutexLock lock(&mu_);
        end_status_ = *ended;
      }
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      session_->Sent(*in_flight_, in_flight_bytes_);
      in_flight_.reset();
      message_.Clear();  // drop our reference to the sent batch's pixels now
      // A failed write means the transport broke (client gone, call cancelled).
      if (!ok) write_failed_ = true;
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    Pump();
  }

  void OnDone() override {
    // gRPC calls OnDone after every other reaction. Withdraw waits for an Opened in
    // progress; none comes afterwards. Close() cancels the window and waits for a
    // ready callback in progress, so none can touch `this` afterwards. Detach waits
    // for an End in progress, which uses context_.
    if (streams_ != nullptr) streams_->Withdraw(pending_unlocked());
    if (StreamSession* session = session_unlocked(); session != nullptr) {
      session->Detach();
      session->Close(how_unlocked());
    }
    delete this;
  }

 private:
  // StreamControl's ender: runs on the replacing stream's or the reaper's thread.
  void End(const absl::Status& status) {
    bool write_in_flight = false;
    {
      absl::MutexLock lock(&mu_);
      if (finish_called_) return;
      end_status_ = status;
      write_in_flight = write_in_flight_;
    }
    // Outside the lock: Cancel waits for a ready callback in progress, which Pumps.
    session_unlocked()->CancelWindow();
    if (write_in_flight) {
      context_->TryCancel();  // OnWriteDone(false) and OnCancel follow, then Pump finishes
    } else {
      Pump();
    }
  }

  // Starts the next write, or the Finish, when one is due. The gRPC call is made
  // outside the lock and is the last thing Pump does.
  void Pump() {
    enum class Action { kNothing, kWrite, kFinish } action = Action::kNothing;
    grpc::Status status;
    StreamSession* writing = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (write_in_flight_ || finish_called_) return;
      if (end_status_.has_value()) {
        how_ = std::string(end_status_->message());
        status = ToGrpcStatus(*end_status_);
        action = Action::kFinish;
      } else if (write_failed_) {
        how_ = "write failed (client gone)";
        status = grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed");
        action = Action::kFinish;
      } else if (cancelled_) {
        how_ = "cancelled (client disconnect or server shutdown)";
        status = grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
        action = Action::kFinish;
      } else if (session_ != nullptr) {
        std::shared_ptr<AssembledBatch> batch;
        absl::StatusOr<BatchWindow::TakeResult> taken = session_->Take(&batch, [this] { Pump(); });
        if (!taken.ok()) {
          how_ = absl::StrCat("error: ", taken.status().ToString());
          status = ToGrpcStatus(taken.status());
          action = Action::kFinish;
        } else if (*taken == BatchWindow::TakeResult::kBatch) {
          write_in_flight_ = true;
          in_flight_bytes_ = EncodeBatch(batch, &message_, session_->server_draining());
          in_flight_ = std::move(batch);
          writing = session_.get();
          action = Action::kWrite;
        } else if (*taken == BatchWindow::TakeResult::kEnd) {
          how_ = "complete";
          action = Action::kFinish;
        }  // kPending: the window calls Pump again once the batch is ready.
      }    // No session yet: Opened calls Pump.
      if (action == Action::kFinish) finish_called_ = true;
    }
    if (action == Action::kWrite) {
      writing->WriteStarted();
      StartWrite(&message_);
    }
    if (action == Action::kFinish) Finish(status);
  }

  // OnDone runs after every reaction has returned; nothing else holds the lock.
  std::string how_unlocked() ABSL_NO_THREAD_SAFETY_ANALYSIS { return how_; }
  std::shared_ptr<StreamManager::Pending> pending_unlocked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return pending_;
  }
  // Set once, by Opened, before any reaction that uses it can run.
  StreamSession* session_unlocked() ABSL_NO_THREAD_SAFETY_ANALYSIS { return session_.get(); }

  grpc::CallbackServerContext* const context_ = nullptr;  // null for a refused stream
  StreamManager* const streams_ = nullptr;                // null for a refused stream
  absl::Mutex mu_;
  std::unique_ptr<StreamSession> session_ ABSL_GUARDED_BY(mu_);           // null until Opened
  std::shared_ptr<StreamManager::Pending> pending_ ABSL_GUARDED_BY(mu_);  // waiting for memory
  std::optional<absl::Status> end_status_ ABSL_GUARDED_BY(mu_);  // ended from outside, refused
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;            // one write at a time
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;              // Finish() issued (exactly once)
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;               // OnWriteDone(false) seen
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;                  // OnCancel seen
  std::string how_ ABSL_GUARDED_BY(mu_) = "refused";             // for the close log line
  grpc::ByteBuffer message_;  // the write in flight; touched only by the Pump that starts it
  std::shared_ptr<AssembledBatch> in_flight_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A streaming call refused before its handler: finishes at once with `status`.
template <typename Response>
class RefusedStream final : public grpc::ServerWriteReactor<Response> {
 public:
  explicit RefusedStream(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// The index gRPC's generated code gives `method` of shardcast.v1.Shardcast (its place
// in the service's descriptor). A name the proto lacks is a programming error.
int MethodIndex(const char* method) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::Shardcast::service_full_name());
  const google::protobuf::MethodDescriptor* found =
      service == nullptr ? nullptr : service->FindMethodByName(method);
  if (found == nullptr) {
    LogError("server", absl::StrCat("shardcast.v1.Shardcast has no method ", method));
    std::abort();
  }
  return found->index();
}

}  // namespace

GrpcAdapter::GrpcAdapter(ServiceCore* impl, const TokenAuthenticator* tokens)
    : impl_(impl), tokens_(tokens) {
  Serve("Register", &GrpcAdapter::HandleRegister);
  Serve("StreamBatches", &GrpcAdapter::HandleStreamBatches);
  Serve("GetStatus", &GrpcAdapter::HandleGetStatus);
}

template <typename Request, typename Response>
void GrpcAdapter::Serve(const char* method, UnaryHandler<Request, Response> handler) {
  auto* callback = new grpc::internal::CallbackUnaryHandler<Request, Response>(
      [this, handler](grpc::CallbackServerContext* context, const Request* request,
                      Response* response) -> grpc::ServerUnaryReactor* {
        if (absl::Status auth = Authorize(*context); !auth.ok()) {
          grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
          reactor->Finish(ToGrpcStatus(auth));
          return reactor;
        }
        return (this->*handler)(context, request, response);
      });
  Install<Request>(method, callback);
}

template <typename Request, typename Response>
void GrpcAdapter::Serve(const char* method, ServerStreamingHandler<Request, Response> handler) {
  auto* callback = new grpc::internal::CallbackServerStreamingHandler<Request, Response>(
      [this, handler](grpc::CallbackServerContext* context,
                      const Request* request) -> grpc::ServerWriteReactor<Response>* {
        if (absl::Status auth = Authorize(*context); !auth.ok()) {
          return new RefusedStream<Response>(auth);
        }
        return (this->*handler)(context, request);
      });
  Install<Request>(method, callback);
}

template <typename Request>
void GrpcAdapter::Install(const char* method, grpc::internal::MethodHandler* handler) {
  // A raw method takes its messages as they came (StreamBatches: parsed by hand, its
  // replies encoded by hand for zero-copy pixels).
  if constexpr (std::is_same_v<Request, grpc::ByteBuffer>) {
    MarkMethodRawCallback(MethodIndex(method), handler);
  } else {
    MarkMethodCallback(MethodIndex(method), handler);
  }
}

absl::Status GrpcAdapter::Authorize(const grpc::CallbackServerContext& context) const {
  if (tokens_ == nullptr) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return tokens_->Check("");
  return tokens_->Check(absl::string_view(it->second.data(), it->second.size()));
}

grpc::ServerUnaryReactor* GrpcAdapter::HandleRegister(grpc::CallbackServerContext* context,
                                                      const v1::RegisterRequest* request,
                                                      v1::RegisterResponse* response) {
  absl::StatusOr<v1::RegisterResponse> result =
      impl_->Register(*request, PeerHost(context->peer()));
  // The status before the reply is moved out of `result`.
  const grpc::Status status = ToGrpcStatus(result.status());
  if (result.ok()) *response = *std::move(result);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GrpcAdapter::HandleStreamBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  v1::StreamBatchesRequest parsed;
  grpc::ByteBuffer copy(*request);  // Deserialize consumes its buffer; this copy is a ref
  grpc::Status parse =
      grpc::SerializationTraits<v1::StreamBatchesRequest>::Deserialize(&copy, &parsed);
  if (!parse.ok()) {
    return new BatchWriter(absl::InvalidArgumentError("malformed StreamBatchesRequest"));
  }
  auto* writer = new BatchWriter(context, &impl_->streams());
  writer->WaitingFor(
      impl_->OpenStream(parsed, [writer](absl::StatusOr<std::unique_ptr<StreamSession>> session) {
        writer->Opened(std::move(session));
      }));
  return writer;
}

grpc::ServerUnaryReactor* GrpcAdapter::HandleGetStatus(grpc::CallbackServerContext* context,
                                                       const v1::GetStatusRequest* /*request*/,
                                                       v1::GetStatusResponse* response) {
  *response = impl_->GetStatus();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace shardcast::server

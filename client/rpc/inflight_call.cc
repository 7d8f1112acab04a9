// InflightCall (see inflight_call.h).
#include "client/rpc/inflight_call.h"

namespace shardcast::client {

bool InflightCall::Begin(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return false;
  context_ = context;
  return true;
}

void InflightCall::End() {
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
}

void InflightCall::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  token_.Cancel();  // first: the cancelled RPC's caller reads it
  if (context_ != nullptr) context_->TryCancel();
}

bool InflightCall::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

void InflightCall::CancelCurrent() {
  absl::MutexLock lock(&mu_);
  if (context_ != nullptr) context_->TryCancel();
}

void InflightCall::Reset() {
  absl::MutexLock lock(&mu_);
  stopped_ = false;
  context_ = nullptr;
  token_.Reset();
}

}  // namespace shardcast::client

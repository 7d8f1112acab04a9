// c10d process group (Gloo | NCCL) and the bucketed gradient reducer. The only file that
// names c10d types: LibTorch 1.13 calls the collective base class ProcessGroup, 2.x
// calls it Backend; both have the same broadcast/allreduce/allgather/barrier methods.
#include "client/train/ddp.h"

#include <torch/version.h>

#include <cstdlib>
#include <exception>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardcast::train {
namespace {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// c10d reports failures as exceptions (c10::Error, std::runtime_error from Gloo).
absl::Status FromException(const std::string& what_failed, const std::exception& e) {
  std::string message = e.what();
  // c10::Error appends a C++ backtrace; the first line says what happened.
  if (auto newline = message.find('\n'); newline != std::string::npos) {
    message.resize(newline);
  }
  const std::string text = absl::StrCat(what_failed, ": ", message);
  if (absl::StrContains(message, "imed out") || absl::StrContains(message, "imeout")) {
    return absl::DeadlineExceededError(text);
  }
  return absl::UnavailableError(text);
}

c10d::ReduceOp ToReduceOp(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceKind::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceKind::kSum:
      break;
  }
  return c10d::ReduceOp::SUM;
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || absl::StartsWith(address, "127.") || address == "::1";
}

}  // namespace

struct Communicator::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CollectiveBackend> backend;
  std::string name;
};

Communicator::Communicator(int rank, int world_size, std::unique_ptr<Group> group)
    : rank_(rank), world_size_(world_size), group_(std::move(group)) {}

Communicator::~Communicator() = default;

std::string Communicator::backend() const { return group_ ? group_->name : "none (world size 1)"; }

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const Rendezvous& rdzv,
                                                                   torch::Device device) {
  if (rdzv.world_size < 1 || rdzv.rank < 0 || rdzv.rank >= rdzv.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rdzv.rank, " is not in [0, world size ", rdzv.world_size, ")"));
  }
  // One rank has nothing to synchronize, so no process group by default.
  // SHARDCAST_FORCE_PROCESS_GROUP=1 builds one anyway: the only way to exercise the
  // NCCL path on a machine with one GPU (NCCL refuses two ranks on one device).
  const char* force_group = std::getenv("SHARDCAST_FORCE_PROCESS_GROUP");
  if (rdzv.world_size == 1 && !(force_group != nullptr && std::string(force_group) == "1")) {
    return std::unique_ptr<Communicator>(new Communicator(0, 1, nullptr));
  }
  if (rdzv.master_port <= 0 || rdzv.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT ", rdzv.master_port, " is not a port"));
  }
  auto group = std::make_unique<Group>();
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(rdzv.master_port);
    store_options.isServer = rdzv.rank == 0;
    store_options.numWorkers = static_cast<size_t>(rdzv.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = rdzv.timeout;
    group->store = c10::make_intrusive<c10d::TCPStore>(rdzv.master_addr, store_options);
  } catch (const std::exception& e) {
    return FromException(absl::StrCat("rendezvous with ", rdzv.master_addr, ":", rdzv.master_port,
                                      " as rank ", rdzv.rank, " of ", rdzv.world_size),
                         e);
  }
  try {
    if (device.is_cuda()) {
#ifdef USE_C10D_NCCL
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(device.index()));
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = rdzv.timeout;
      group->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(group->store, rdzv.rank,
                                                                   rdzv.world_size, options);
      group->name = "nccl";
#else
      return absl::FailedPreconditionError(
          "--device cuda with more than one rank needs a LibTorch built with NCCL (this one "
          "was not); use --device cpu (Gloo) or build against a CUDA LibTorch");
#endif
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(rdzv.timeout);
      // Bind where the peers can reach us: GLOO_SOCKET_IFNAME if set (as torch does),
      // loopback for single-machine jobs, else this host's resolvable address.
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (IsLoopback(rdzv.master_addr)) {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      options->threads = 2;
      group->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(group->store, rdzv.rank,
                                                                   rdzv.world_size, options);
      group->name = "gloo";
    }
  } catch (const std::exception& e) {
    return FromException(
        absl::StrCat("creating the process group (rank ", rdzv.rank, " of ", rdzv.world_size, ")"),
        e);
  }
  return std::unique_ptr<Communicator>(
      new Communicator(rdzv.rank, rdzv.world_size, std::move(group)));
}

PendingCollective Communicator::AllReduceAsync(torch::Tensor tensor, ReduceKind kind) {
  if (!group_) return PendingCollective();
  try {
    std::vector<torch::Tensor> tensors = {std::move(tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = ToReduceOp(kind);
    c10::intrusive_ptr<c10d::Work> work = group_->backend->allreduce(tensors, options);
    return PendingCollective([work]() -> absl::Status {
      try {
        work->wait();
      } catch (const std::exception& e) {
        return FromException("all-reduce", e);
      }
      return absl::OkStatus();
    });
  } catch (const std::exception& e) {
    absl::Status status = FromException("all-reduce", e);
    return PendingCollective([status] { return status; });
  }
}

absl::Status Communicator::AllReduce(torch::Tensor tensor, ReduceKind kind) {
  return AllReduceAsync(std::move(tensor), kind).Wait();
}

absl::Status Communicator::BroadcastCoalesced(const std::vector<torch::Tensor>& tensors, int root) {
  if (!group_ || tensors.empty()) return absl::OkStatus();
  // Group by dtype, keeping order, so each group is one contiguous flat buffer.
  std::vector<std::vector<torch::Tensor>> groups;
  for (const torch::Tensor& t : tensors) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.front().scalar_type() == t.scalar_type() && g.front().device() == t.device();
    });
    if (it == groups.end()) {
      groups.push_back({t});
    } else {
      it->push_back(t);
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& group : groups) {
    std::vector<torch::Tensor> flat_parts;
    flat_parts.reserve(group.size());
    for (auto& t : group) flat_parts.push_back(t.detach().reshape(-1));
    std::vector<torch::Tensor> flat = {torch::cat(flat_parts)};
    try {
      c10d::BroadcastOptions options;
      options.rootRank = root;
      group_->backend->broadcast(flat, options)->wait();
    } catch (const std::exception& e) {
      return FromException(absl::StrCat("broadcast from rank ", root), e);
    }
    int64_t offset = 0;
    for (auto& t : group) {
      const int64_t n = t.numel();
      t.detach().copy_(flat[0].narrow(0, offset, n).view_as(t));
      offset += n;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<torch::Tensor>> Communicator::AllGather(const torch::Tensor& tensor) {
  if (!group_) return std::vector<torch::Tensor>{tensor.clone()};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < world_size_; ++r) outputs[0].push_back(torch::empty_like(tensor));
  std::vector<torch::Tensor> inputs = {tensor.contiguous()};
  try {
    group_->backend->allgather(outputs, inputs)->wait();
  } catch (const std::exception& e) {
    return FromException("all-gather", e);
  }
  return outputs[0];
}

absl::Status Communicator::Barrier() {
  if (!group_) return absl::OkStatus();
  try {
    group_->backend->barrier()->wait();
  } catch (const std::exception& e) {
    return FromException("barrier", e);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Communicator::ShareFromRankZero(const std::string& key,
                                                            const std::string& value) {
  if (!group_) return value;
  const std::string store_key = absl::StrCat("shardcast/", key);
  try {
    if (rank_ == 0) {
      group_->store->set(store_key, std::vector<uint8_t>(value.begin(), value.end()));
    }
    const std::vector<uint8_t> shared = group_->store->get(store_key);
    return std::string(shared.begin(), shared.end());
  } catch (const std::exception& e) {
    return FromException(absl::StrCat("sharing '", key, "' from rank 0"), e);
  }
}

// --- GradientReducer ---

GradientReducer::GradientReducer(Communicator* comm, std::vector<torch::Tensor> params,
                                 int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  slots_.resize(params_.size());
  // Reverse order: the last layers' gradients are produced first in backward.
  int64_t bucket_used = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k];
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    const bool new_bucket =
        buckets_.empty() || bucket_used + bytes > bucket_bytes ||
        params_[buckets_.back().params.front()].scalar_type() != p.scalar_type() ||
        params_[buckets_.back().params.front()].device() != p.device();
    if (new_bucket) {
      buckets_.emplace_back();
      bucket_used = 0;
    }
    Bucket& bucket = buckets_.back();
    slots_[k] =
        Slot{buckets_.size() - 1, bucket_used / static_cast<int64_t>(p.element_size()), p.numel()};
    bucket.params.push_back(k);
    bucket_used += bytes;
  }
  for (Bucket& bucket : buckets_) {
    int64_t numel = 0;
    for (size_t k : bucket.params) numel += params_[k].numel();
    const torch::Tensor& first = params_[bucket.params.front()];
    bucket.flat = torch::zeros({numel}, first.options().requires_grad(false));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    hook_handles_.push_back(
        params_[k].register_hook([this, k](const torch::Tensor& grad) { OnGradient(k, grad); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hook_handles_[k]);
}

void GradientReducer::PrepareForBackward() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& slot : slots_) slot.ready = false;
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.launched = false;
    bucket.work = PendingCollective();
  }
  next_to_launch_ = 0;
  in_backward_ = true;
  launched_during_backward_ = 0;
  hook_error_ = absl::OkStatus();
}

void GradientReducer::OnGradient(size_t param_index, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_backward_) return;  // a backward outside a training step (not ours to reduce)
  Slot& slot = slots_[param_index];
  Bucket& bucket = buckets_[slot.bucket];
  if (grad.is_sparse()) {
    hook_error_ = absl::UnimplementedError("sparse gradients are not supported by the reducer");
    return;
  }
  torch::NoGradGuard no_grad;
  torch::Tensor view = bucket.flat.narrow(0, slot.offset, slot.numel);
  if (slot.ready) {
    view.add_(grad.reshape(-1));  // a parameter whose gradient arrives in parts
    return;
  }
  view.copy_(grad.reshape(-1));
  slot.ready = true;
  if (--bucket.pending == 0) LaunchReadyBucketsLocked();
}

void GradientReducer::LaunchReadyBucketsLocked() {
  // In index order only: every rank must issue the same collectives in the same order.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_to_launch_];
    bucket.work = comm_->AllReduceAsync(bucket.flat, ReduceKind::kSum);
    bucket.launched = true;
    if (in_backward_) ++launched_during_backward_;
    ++next_to_launch_;
  }
}

absl::Status GradientReducer::FinishBackward() {
  std::lock_guard<std::mutex> lock(mu_);
  in_backward_ = false;
  if (!hook_error_.ok()) return hook_error_;
  // Parameters that took no part in this step's graph contribute zeros.
  for (size_t b = next_to_launch_; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    for (size_t k : bucket.params) {
      Slot& slot = slots_[k];
      if (!slot.ready) {
        bucket.flat.narrow(0, slot.offset, slot.numel).zero_();
        slot.ready = true;
        --bucket.pending;
      }
    }
  }
  LaunchReadyBucketsLocked();
  absl::Status status;
  for (Bucket& bucket : buckets_) status.Update(bucket.work.Wait());
  if (!status.ok()) return status;
  torch::NoGradGuard no_grad;
  const double world = comm_->world_size();
  for (Bucket& bucket : buckets_) {
    bucket.flat.div_(world);
    for (size_t k : bucket.params) {
      torch::Tensor& param = params_[k];
      const Slot& slot = slots_[k];
      torch::Tensor averaged = bucket.flat.narrow(0, slot.offset, slot.numel).view_as(param);
      if (param.grad().defined()) {
        param.mutable_grad().copy_(averaged);
      } else {
        param.mutable_grad() = averaged.clone();
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace shardcast::train

// Data parallelism over c10d, as PyTorch DDP does it: TCPStore rendezvous, a Gloo (CPU)
// or NCCL (CUDA) process group, rank 0's state broadcast, bucketed gradient all-reduce.
// c10d's C++ types appear only in ddp.cc, so LibTorch version drift stays in one file.
#ifndef SHARDCAST_CLIENT_TRAIN_DDP_H_
#define SHARDCAST_CLIENT_TRAIN_DDP_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardcast::train {

// torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Rendezvous and per-collective timeout. A dead peer is noticed sooner: its sockets
  // close and the collective fails at once.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// An asynchronous collective; Wait() returns its error, if any.
class PendingCollective {
 public:
  PendingCollective() = default;
  explicit PendingCollective(std::function<absl::Status()> wait) : wait_(std::move(wait)) {}
  absl::Status Wait() { return wait_ ? wait_() : absl::OkStatus(); }

 private:
  std::function<absl::Status()> wait_;
};

enum class ReduceKind { kSum, kMin, kMax };

// A process group of world_size ranks. With world_size 1 every collective is a local
// no-op and no rendezvous happens. Collective calls must be made in the same order on
// every rank (c10d's rule). Errors (a peer died, timeout) come back as UNAVAILABLE /
// DEADLINE_EXCEEDED statuses rather than exceptions.
class Communicator {
 public:
  // Rendezvous at master_addr:master_port (rank 0 hosts the TCPStore) and builds the
  // group: NCCL when `device` is CUDA and LibTorch was built with NCCL, else Gloo.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const Rendezvous& rendezvous,
                                                              torch::Device device);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  std::string backend() const;

  // In place on every rank. REQUIRES: `tensor` contiguous, on the group's device.
  PendingCollective AllReduceAsync(torch::Tensor tensor, ReduceKind kind = ReduceKind::kSum);
  absl::Status AllReduce(torch::Tensor tensor, ReduceKind kind = ReduceKind::kSum);
  // Overwrites `tensors` on every rank with root's values (coalesced per dtype, so one
  // collective per dtype however many tensors there are).
  absl::Status BroadcastCoalesced(const std::vector<torch::Tensor>& tensors, int root);
  // Every rank's `tensor`, in rank order.
  absl::StatusOr<std::vector<torch::Tensor>> AllGather(const torch::Tensor& tensor);
  absl::Status Barrier();

  // Rank 0's `value` on every rank, through the rendezvous store: for what rank 0
  // decides alone and every rank must use (a generated job id). With world size 1,
  // `value` itself. Waits for rank 0 up to the rendezvous timeout.
  absl::StatusOr<std::string> ShareFromRankZero(const std::string& key, const std::string& value);

 private:
  struct Group;
  Communicator(int rank, int world_size, std::unique_ptr<Group> group);

  int rank_;
  int world_size_;
  std::unique_ptr<Group> group_;  // null when world_size == 1
};

// Averages gradients across ranks in buckets of about `bucket_bytes`, filled in reverse
// parameter order (gradients become ready roughly back to front during backward).
// Autograd hooks copy each gradient into its bucket as it is produced and launch the
// bucket's all-reduce as soon as the bucket is complete, so communication overlaps the
// rest of backward; buckets are launched in index order (the same on every rank).
//
// Per step: PrepareForBackward(); loss.backward(); FinishBackward(); optimizer.step().
// REQUIRES: `comm` and the parameters outlive the reducer; every rank constructs it
// with the same parameter list.
class GradientReducer {
 public:
  GradientReducer(Communicator* comm, std::vector<torch::Tensor> params, int64_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void PrepareForBackward();
  // Launches buckets whose gradients never arrived (unused parameters count as zero),
  // waits for every all-reduce and writes the averaged gradients to param.grad().
  absl::Status FinishBackward();

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets launched from inside backward in the last step (overlap achieved).
  int64_t launched_during_backward() const { return launched_during_backward_; }

 private:
  struct Slot {
    size_t bucket;
    int64_t offset;
    int64_t numel;
    bool ready = false;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> params;  // indices into params_
    size_t pending = 0;          // gradients still missing this step
    PendingCollective work;
    bool launched = false;
  };

  void OnGradient(size_t param_index, const torch::Tensor& grad);
  void LaunchReadyBucketsLocked();

  Communicator* comm_;
  std::vector<torch::Tensor> params_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hook_handles_;
  std::mutex mu_;              // hooks may run on autograd's device threads
  size_t next_to_launch_ = 0;  // guarded by mu_
  bool in_backward_ = false;   // guarded by mu_
  int64_t launched_during_backward_ = 0;
  absl::Status hook_error_;  // guarded by mu_
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_DDP_H_

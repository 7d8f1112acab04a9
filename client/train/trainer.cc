// One rank's training loop (see trainer.h).
#include "client/train/trainer.h"

#include <chrono>
#include <csignal>
#include <ctime>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/train/checkpoint.h"

namespace shardcast::train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double UnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const TrainerConfig& c,
                                                       std::vector<torch::Tensor> params) {
  if (c.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(params,
                                              torch::optim::AdamOptions(c.lr)
                                                  .betas(std::make_tuple(c.betas[0], c.betas[1]))
                                                  .weight_decay(c.weight_decay));
}

absl::Status WithRank(int rank, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
}

}  // namespace

Trainer::Trainer(TrainerConfig config, Communicator* comm, BatchSource* source,
                 TrainableModel* model, MetricsWriter* metrics, ProgressBar* progress)
    : config_(std::move(config)),
      comm_(comm),
      source_(source),
      model_(model),
      metrics_(metrics),
      progress_(progress) {}

absl::Status Trainer::Checkpoint(torch::optim::Optimizer& optimizer, int64_t epoch,
                                 int64_t next_batch) {
  if (config_.ckpt_dir.empty() || comm_->rank() != 0) return absl::OkStatus();
  CheckpointPosition position;
  position.epoch = epoch;
  position.next_batch = next_batch;
  position.global_step = global_step_;
  position.world_size = comm_->world_size();
  position.batch_size = config_.batch_size;
  position.fingerprint = source_->fingerprint();
  absl::StatusOr<std::string> path =
      SaveCheckpointInDir(config_.ckpt_dir, config_.ckpt_keep, *model_, optimizer, position);
  if (!path.ok()) return path.status();
  if (metrics_) {
    metrics_->Write(JsonLine()
                        .Add("event", "checkpoint")
                        .Add("rank", comm_->rank())
                        .Add("epoch", epoch)
                        .Add("next_batch", next_batch)
                        .Add("step", global_step_)
                        .Add("path", *path)
                        .AddTime("time", UnixTime()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveFinalModel() {
  if (config_.save_path.empty()) return absl::OkStatus();
  const bool per_rank = config_.save_path.find("{rank}") != std::string::npos;
  if (!per_rank && comm_->rank() != 0) return absl::OkStatus();
  const std::string path =
      absl::StrReplaceAll(config_.save_path, {{"{rank}", absl::StrCat(comm_->rank())}});
  return model_->SaveFinal(path);
}

absl::StatusOr<TrainerResult> Trainer::Run() {
  const int rank = comm_->rank();
  const int world = comm_->world_size();
  const torch::Device device = config_.device;
  model_->To(device);
  model_->SetTraining(true);
  std::vector<torch::Tensor> params = model_->Parameters();
  if (params.empty()) return absl::InvalidArgumentError("the model has no trainable parameters");
  std::unique_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(config_, params);

  int64_t start_epoch = 0;
  int64_t start_batch = 0;
  if (!config_.resume_path.empty()) {
    absl::StatusOr<std::string> path = ResolveResumePath(config_.resume_path);
    if (!path.ok()) return WithRank(rank, path.status());
    absl::StatusOr<CheckpointPosition> position =
        LoadCheckpoint(*path, *model_, *optimizer, device);
    if (!position.ok()) return WithRank(rank, position.status());
    if (position->world_size != world || position->batch_size != config_.batch_size ||
        position->fingerprint != source_->fingerprint()) {
      return WithRank(
          rank, absl::FailedPreconditionError(absl::StrFormat(
                    "checkpoint %s was taken with world size %d, batch size %d, plan %s; this run "
                    "has world size %d, batch size %d, plan %s. Resuming would not continue the "
                    "same batch sequence; use the same data, job settings and ranks.",
                    *path, position->world_size, position->batch_size, position->fingerprint, world,
                    config_.batch_size, source_->fingerprint())));
    }
    start_epoch = position->epoch;
    start_batch = position->next_batch;
    global_step_ = position->global_step;
  }

  // Every rank starts from rank 0's parameters and buffers, as DDP's constructor does.
  std::vector<torch::Tensor> state;
  for (auto& [name, t] : model_->NamedParameters()) state.push_back(t);
  std::vector<torch::Tensor> buffers;
  for (auto& [name, t] : model_->NamedBuffers()) buffers.push_back(t);
  state.insert(state.end(), buffers.begin(), buffers.end());
  if (absl::Status s = comm_->BroadcastCoalesced(state, 0); !s.ok()) return WithRank(rank, s);

  std::unique_ptr<GradientReducer> reducer;
  if (world > 1) {
    reducer = std::make_unique<GradientReducer>(
        comm_, params, static_cast<int64_t>(config_.bucket_mb * 1024 * 1024));
  }
  const int64_t n = source_->batches_per_epoch();
  if (metrics_) {
    metrics_->Write(JsonLine()
                        .Add("event", "start")
                        .Add("rank", rank)
                        .Add("world_size", world)
                        .Add("backend", comm_->backend())
                        .Add("device", device.str())
                        .Add("model", model_->Describe())
                        .Add("source", source_->Describe())
                        .Add("n", n)
                        .Add("epoch", start_epoch)
                        .Add("next_batch", start_batch)
                        .Add("step", global_step_)
                        .Add("resumed_from", config_.resume_path)
                        .Add("buckets", static_cast<int64_t>(reducer ? reducer->num_buckets() : 0))
                        .AddTime("time", UnixTime()));
  }

  TrainerResult result;
  const auto stat_options = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  bool stop = config_.max_steps > 0 && global_step_ >= config_.max_steps;
  for (int64_t epoch = start_epoch; epoch < config_.epochs && !stop; ++epoch) {
    const int64_t first = epoch == start_epoch ? start_batch : 0;
    if (absl::Status s = source_->StartEpoch(epoch, first); !s.ok()) return WithRank(rank, s);
    progress_->StartEpoch(epoch, config_.epochs, n, first);
    const auto epoch_start = Clock::now();
    int64_t consumed = first;
    double loss_sum = 0, correct_sum = 0, count_sum = 0;  // over all ranks, this run's steps
    int64_t images_all_ranks = 0;
    while (true) {
      const auto step_start = Clock::now();
      absl::StatusOr<std::optional<TrainingBatch>> next = source_->Next();
      // Time spent waiting for input: near zero unless the data pipeline stalls training.
      const double wait_seconds = Seconds(Clock::now() - step_start);
      if (!next.ok()) {
        return WithRank(rank, absl::Status(next.status().code(),
                                           absl::StrCat("epoch ", epoch, " batch ", consumed, ": ",
                                                        next.status().message())));
      }
      // Agree first that every rank has a batch: a rank that ran short would otherwise
      // leave its peers waiting in a gradient all-reduce it never joins. The same
      // all-reduce carries stop requests, so all ranks stop at the same step.
      const int my_signal = config_.stop_signal ? config_.stop_signal->load() : 0;
      torch::Tensor have = torch::tensor({next->has_value() ? 1.0 : 0.0, my_signal ? 1.0 : 0.0},
                                         torch::TensorOptions().dtype(torch::kFloat64))
                               .to(device);
      if (absl::Status s = comm_->AllReduce(have); !s.ok()) return WithRank(rank, s);
      const torch::Tensor agreed = have.cpu();
      const int ranks_with_batch = static_cast<int>(agreed[0].item<double>() + 0.5);
      if (agreed[1].item<double>() > 0) {
        // The fetched batch is not trained on: the checkpoint points at it.
        if (absl::Status s = Checkpoint(*optimizer, epoch, consumed); !s.ok()) {
          return WithRank(rank, s);
        }
        result.stopped_by_signal = my_signal ? my_signal : SIGTERM;
        result.global_step = global_step_;
        if (metrics_) {
          metrics_->Write(JsonLine()
                              .Add("event", "stopped")
                              .Add("rank", rank)
                              .Add("signal", result.stopped_by_signal)
                              .Add("epoch", epoch)
                              .Add("next_batch", consumed)
                              .Add("step", global_step_)
                              .AddTime("time", UnixTime()));
        }
        return result;
      }
      if (ranks_with_batch == 0) break;
      if (ranks_with_batch != world) {
        return WithRank(rank, absl::DataLossError(absl::StrFormat(
                                  "epoch %d batch %d: %d of %d ranks have a batch and the others' "
                                  "streams ended (this rank: %s); ranks must consume the same "
                                  "number of batches (n = %d)",
                                  epoch, consumed, ranks_with_batch, world,
                                  next->has_value() ? "has one" : "ended", n)));
      }
      TrainingBatch& batch = **next;
      if (batch.index != consumed || batch.epoch != epoch) {
        return WithRank(rank, absl::DataLossError(absl::StrFormat(
                                  "expected epoch %d batch %d, the source sent epoch %d batch %d",
                                  epoch, consumed, batch.epoch, batch.index)));
      }
      // DDP's broadcast_buffers: rank 0's BatchNorm statistics before every forward.
      if (world > 1 && !buffers.empty()) {
        if (absl::Status s = comm_->BroadcastCoalesced(buffers, 0); !s.ok()) {
          return WithRank(rank, s);
        }
      }
      optimizer->zero_grad();
      if (reducer) reducer->PrepareForBackward();
      torch::Tensor logits;
      torch::Tensor loss;
      try {
        logits = model_->Forward(batch.images);
        torch::Tensor valid = batch.labels >= 0;
        if (valid.any().item<bool>()) {
          loss = torch::nn::functional::cross_entropy(
              logits, batch.labels,
              torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
        } else {
          loss = logits.sum() * 0.0;  // all padding: no signal, but join the all-reduce
        }
        loss.backward();
      } catch (const std::exception& e) {
        return WithRank(rank,
                        absl::InternalError(absl::StrCat(
                            "epoch ", epoch, " batch ", consumed,
                            ": forward/backward failed: ", std::string(e.what()).substr(0, 500))));
      }
      if (reducer) {
        if (absl::Status s = reducer->FinishBackward(); !s.ok()) return WithRank(rank, s);
      }
      optimizer->step();
      ++global_step_;
      ++consumed;

      // Loss and top-1 over all ranks: one small all-reduce of sums.
      torch::Tensor stats;
      double local_loss, local_acc;
      {
        torch::NoGradGuard no_grad;
        torch::Tensor valid = batch.labels >= 0;
        torch::Tensor count = valid.sum().to(torch::kFloat64);
        torch::Tensor correct =
            (logits.argmax(1).eq(batch.labels) & valid).sum().to(torch::kFloat64);
        torch::Tensor loss_total = loss.detach().to(torch::kFloat64) * count;
        stats = torch::stack({loss_total, correct, count}).to(device);
        const double c = count.item<double>();
        local_loss = c > 0 ? loss_total.item<double>() / c : 0.0;
        local_acc = c > 0 ? correct.item<double>() / c : 0.0;
      }
      if (absl::Status s = comm_->AllReduce(stats); !s.ok()) return WithRank(rank, s);
      const torch::Tensor global = stats.cpu();
      const double g_loss_sum = global[0].item<double>(), g_correct = global[1].item<double>(),
                   g_count = global[2].item<double>();
      loss_sum += g_loss_sum;
      correct_sum += g_correct;
      count_sum += g_count;
      const int64_t batch_images = batch.images.size(0);
      images_all_ranks += batch_images * world;
      const double step_seconds = Seconds(Clock::now() - step_start);
      const double epoch_seconds = Seconds(Clock::now() - epoch_start);
      const double images_per_s = epoch_seconds > 0 ? images_all_ranks / epoch_seconds : 0.0;
      progress_->Update(consumed, images_per_s, count_sum > 0 ? loss_sum / count_sum : 0.0,
                        count_sum > 0 ? correct_sum / count_sum : 0.0);
      if (metrics_) {
        JsonLine line;
        line.Add("event", "step")
            .Add("rank", rank)
            .Add("epoch", epoch)
            .Add("batch", batch.index)
            .Add("step", global_step_)
            .Add("loss", local_loss)
            .Add("acc", local_acc)
            .Add("global_loss", g_count > 0 ? g_loss_sum / g_count : 0.0)
            .Add("global_acc", g_count > 0 ? g_correct / g_count : 0.0)
            .Add("images_per_s", step_seconds > 0 ? batch_images / step_seconds : 0.0)
            .Add("step_s", step_seconds)
            .Add("wait_s", wait_seconds)
            .AddTime("time", UnixTime());
        // Buckets whose all-reduce started inside backward (overlapping it).
        if (reducer) line.Add("buckets_in_backward", reducer->launched_during_backward());
        if (config_.log_keys) {
          std::vector<std::string> keys;
          for (const SampleMeta& m : batch.samples) keys.push_back(m.key);
          line.Add("keys", keys);
        }
        metrics_->Write(line);
      }
      if (config_.max_steps > 0 && global_step_ >= config_.max_steps) {
        stop = true;
        if (absl::Status s = Checkpoint(*optimizer, epoch, consumed); !s.ok())
          return WithRank(rank, s);
        break;
      }
      if (config_.ckpt_every > 0 && global_step_ % config_.ckpt_every == 0 && consumed < n) {
        if (absl::Status s = Checkpoint(*optimizer, epoch, consumed); !s.ok())
          return WithRank(rank, s);
      }
    }
    if (stop && consumed < n) break;  // --max-steps ended the run mid-epoch

    // Every rank must have consumed exactly n batches of this epoch.
    torch::Tensor mine = torch::full({1}, static_cast<double>(consumed), stat_options);
    absl::StatusOr<std::vector<torch::Tensor>> all = comm_->AllGather(mine);
    if (!all.ok()) return WithRank(rank, all.status());
    std::vector<int64_t> per_rank;
    bool mismatch = false;
    for (const torch::Tensor& t : *all) {
      per_rank.push_back(static_cast<int64_t>(t.item<double>()));
      mismatch |= per_rank.back() != n;
    }
    const double seconds = Seconds(Clock::now() - epoch_start);
    const double epoch_loss = count_sum > 0 ? loss_sum / count_sum : 0.0;
    const double epoch_acc = count_sum > 0 ? correct_sum / count_sum : 0.0;
    const double images_per_s = seconds > 0 ? images_all_ranks / seconds : 0.0;
    progress_->FinishEpoch(consumed, images_per_s, epoch_loss, epoch_acc, seconds);
    if (metrics_) {
      metrics_->Write(JsonLine()
                          .Add("event", "epoch")
                          .Add("rank", rank)
                          .Add("epoch", epoch)
                          .Add("n", n)
                          .Add("batches_per_rank", per_rank)
                          .Add("first_batch", first)
                          .Add("step", global_step_)
                          .Add("loss", epoch_loss)
                          .Add("acc", epoch_acc)
                          .Add("images_per_s", images_per_s)
                          .Add("seconds", seconds)
                          .AddTime("time", UnixTime()));
    }
    if (mismatch) {
      return WithRank(rank, absl::DataLossError(absl::StrFormat(
                                "epoch %d: ranks consumed [%s] batches, expected n = %d on every "
                                "rank; stopping (DDP would hang or train on unequal data)",
                                epoch, absl::StrJoin(per_rank, ", "), n)));
    }
    result.epochs_completed = epoch + 1;
    result.last_epoch_loss = epoch_loss;
    result.last_epoch_acc = epoch_acc;
    if (absl::Status s = Checkpoint(*optimizer, epoch + 1, 0); !s.ok()) return WithRank(rank, s);
    if (config_.max_steps > 0 && global_step_ >= config_.max_steps) stop = true;
  }
  if (absl::Status s = SaveFinalModel(); !s.ok()) return WithRank(rank, s);
  result.global_step = global_step_;
  if (metrics_) {
    metrics_->Write(JsonLine()
                        .Add("event", "end")
                        .Add("rank", rank)
                        .Add("step", global_step_)
                        .Add("epochs_completed", result.epochs_completed)
                        .AddTime("time", UnixTime()));
  }
  return result;
}

}  // namespace shardcast::train

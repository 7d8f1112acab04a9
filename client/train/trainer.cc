// One rank's training loop (see trainer.h).
#include "client/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/reconnect/mix_resume.h"
#include "client/reconnect/run_rules.h"
#include "client/train/checkpoint.h"
#include "common/util/digest.h"

namespace shardcast::train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double UnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const TrainerConfig& c,
                                                       const std::vector<torch::Tensor>& params) {
  if (c.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(params,
                                              torch::optim::AdamOptions(c.lr)
                                                  .betas(std::make_tuple(c.betas[0], c.betas[1]))
                                                  .weight_decay(c.weight_decay));
}

// What the ranks of a job must agree on before the first batch (Trainer::AgreeOnJob),
// as a fixed-size int64 tensor so one all-gather carries it: the numbers, then the
// fingerprint one character a word (a longer one is replaced by its digest).
struct RankJob {
  int64_t batches_per_epoch = 0;
  int64_t world_size = 0;
  int64_t batch_size = 0;
  int64_t num_classes = 0;
  std::string fingerprint;

  static constexpr int64_t kNumbers = 5;  // the four above and the fingerprint's length
  static constexpr int64_t kFingerprintChars = 64;
  static constexpr int64_t kWords = kNumbers + kFingerprintChars;

  torch::Tensor Encode() const {
    std::string fp = fingerprint;
    if (fp.size() > kFingerprintChars) {
      Digest128 digest;
      digest.AddString(fingerprint);
      fp = "digest:" + digest.Hex();
    }
    torch::Tensor t = torch::zeros({kWords}, torch::TensorOptions().dtype(torch::kInt64));
    auto w = t.accessor<int64_t, 1>();
    w[0] = batches_per_epoch;
    w[1] = world_size;
    w[2] = batch_size;
    w[3] = num_classes;
    w[4] = static_cast<int64_t>(fp.size());
    for (size_t i = 0; i < fp.size(); ++i) w[kNumbers + i] = static_cast<unsigned char>(fp[i]);
    return t;
  }

  static RankJob Decode(const torch::Tensor& tensor) {
    const torch::Tensor t = tensor.cpu().contiguous();
    auto w = t.accessor<int64_t, 1>();
    RankJob job;
    job.batches_per_epoch = w[0];
    job.world_size = w[1];
    job.batch_size = w[2];
    job.num_classes = w[3];
    const int64_t length = std::clamp<int64_t>(w[4], 0, kFingerprintChars);
    for (int64_t i = 0; i < length; ++i) {
      job.fingerprint.push_back(static_cast<char>(w[kNumbers + i]));
    }
    return job;
  }
};

// The fields in which some rank differs from rank 0, each with every rank's value,
// e.g. "batches per epoch: rank 0 has 4, rank 1 has 6"; empty when all agree.
std::vector<std::string> JobDifferences(const std::vector<RankJob>& jobs) {
  struct Field {
    const char* name;
    std::function<std::string(const RankJob&)> value;
  };
  const Field fields[] = {
      {"job fingerprint", [](const RankJob& j) { return j.fingerprint; }},
      {"batches per epoch", [](const RankJob& j) { return absl::StrCat(j.batches_per_epoch); }},
      {"world size", [](const RankJob& j) { return absl::StrCat(j.world_size); }},
      {"batch size", [](const RankJob& j) { return absl::StrCat(j.batch_size); }},
      {"classes", [](const RankJob& j) { return absl::StrCat(j.num_classes); }},
  };
  std::vector<std::string> differences;
  for (const Field& field : fields) {
    bool differs = false;
    std::vector<std::string> values;
    for (size_t rank = 0; rank < jobs.size(); ++rank) {
      const std::string value = field.value(jobs[rank]);
      differs = differs || value != field.value(jobs[0]);
      values.push_back(absl::StrCat("rank ", rank, " has ", value));
    }
    if (differs) differences.push_back(absl::StrCat(field.name, ": ", absl::StrJoin(values, ", ")));
  }
  return differences;
}

absl::Status WithRank(int rank, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
}

}  // namespace

Trainer::Trainer(TrainerConfig config, TrainerRuntime runtime, Communicator* comm,
                 BatchSource* source, TrainableModel* model, MetricsWriter* metrics,
                 ProgressBar* progress)
    : config_(std::move(config)),
      runtime_(runtime),
      comm_(comm),
      source_(source),
      model_(model),
      metrics_(metrics),
      progress_(progress) {}

absl::Status Trainer::Checkpoint(int64_t epoch, int64_t next_batch, int64_t sample_offset) {
  if (config_.ckpt_dir.empty() || comm_->rank() != 0) return absl::OkStatus();
  CheckpointPosition position;
  position.epoch = epoch;
  position.next_batch = next_batch;
  position.sample_offset = sample_offset;
  position.global_step = global_step_;
  position.world_size = comm_->world_size();
  position.batch_size = runtime_.batch_size;
  position.fingerprint = source_->fingerprint();
  position.batches_in_epoch = next_batch == 0 ? 0 : epoch_n_;
  position.mix = mix_run_;
  absl::StatusOr<std::string> path =
      SaveCheckpointInDir(config_.ckpt_dir, config_.ckpt_keep, *model_, *optimizer_, position);
  if (!path.ok()) return path.status();
  if (metrics_) {
    metrics_->Write(JsonLine()
                        .Add("event", "checkpoint")
                        .Add("rank", comm_->rank())
                        .Add("epoch", epoch)
                        .Add("next_batch", next_batch)
                        .Add("step", global_step_)
                        .Add("path", *path)
                        .Add("samples_consumed", position.SamplesConsumed())
                        .AddTime("time", UnixTime()));
  }
  return absl::OkStatus();
}

std::string BestModelPath(const std::string& save_path) {
  const size_t slash = save_path.rfind('/');
  const size_t dot = save_path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1)) {
    return save_path + ".best";
  }
  return absl::StrCat(save_path.substr(0, dot), ".best", save_path.substr(dot));
}

void ReportEval(const EvalSums& sums, int64_t epoch, int64_t epochs, double seconds, bool best,
                int rank, MetricsWriter* metrics, ProgressBar* progress) {
  progress->Note(absl::StrFormat(
      "%s: val loss %.4f top1 %.2f%% top5 %.2f%% (%d samples, %.1f s)%s",
      epoch >= 0 ? absl::StrCat("epoch ", epoch + 1, "/", epochs) : std::string("eval"),
      sums.loss(), 100 * sums.top1(), 100 * sums.top5(), sums.count, seconds,
      best ? ", best so far" : ""));
  if (metrics == nullptr) return;
  metrics->Write(JsonLine()
                     .Add("event", "eval")
                     .Add("rank", rank)
                     .Add("epoch", epoch)
                     .Add("loss", sums.loss())
                     .Add("top1", sums.top1())
                     .Add("top5", sums.top5())
                     .Add("loss_sum", sums.loss_sum)
                     .Add("correct1", sums.correct1)
                     .Add("correct5", sums.correct5)
                     .Add("count", sums.count)
                     .Add("substituted", sums.substituted)
                     .Add("best", best)
                     .Add("seconds", seconds)
                     .AddTime("time", UnixTime()));
}

absl::Status Trainer::SaveModel(const std::string& path_pattern) {
  const bool per_rank = path_pattern.find("{rank}") != std::string::npos;
  if (!per_rank && comm_->rank() != 0) return absl::OkStatus();
  const std::string path =
      absl::StrReplaceAll(path_pattern, {{"{rank}", absl::StrCat(comm_->rank())}});
  return model_->SaveFinal(path);
}

absl::Status Trainer::SaveFinalModel() {
  if (config_.save.empty()) return absl::OkStatus();
  return SaveModel(config_.save);
}

absl::Status Trainer::Evaluate(int64_t epoch, TrainerResult* result) {
  const auto start = Clock::now();
  absl::StatusOr<EvalSums> sums = runtime_.evaluator->Run();
  if (!sums.ok()) {
    return absl::Status(sums.status().code(),
                        absl::StrCat("epoch ", epoch, ": ", sums.status().message()));
  }
  const bool best = sums->top1() > result->best_val_top1;
  result->last_eval = *sums;
  if (best) {
    result->best_val_top1 = sums->top1();
    result->best_val_epoch = epoch;
  }
  ReportEval(*sums, epoch, config_.epochs, Seconds(Clock::now() - start), best, comm_->rank(),
             metrics_, progress_);
  if (best && !config_.save.empty()) return SaveModel(BestModelPath(config_.save));
  return absl::OkStatus();
}

client::MixJob Trainer::ThisMixJob() const {
  client::MixJob job = source_->mixture();
  job.global_batch = int64_t{comm_->world_size()} * runtime_.batch_size;
  return job;
}

client::SavedMix Trainer::SavedMixOf(const CheckpointPosition& position) {
  client::SavedMix saved;
  saved.position =
      client::SavedPosition{position.epoch, position.next_batch, position.sample_offset,
                            position.world_size, position.batch_size};
  saved.batches_in_epoch = position.batches_in_epoch;
  saved.job_fingerprint = position.fingerprint;
  saved.run = position.mix;
  return saved;
}

absl::StatusOr<bool> Trainer::ResumeMixture(const std::string& path,
                                            const CheckpointPosition& position,
                                            StartPosition* start) {
  absl::StatusOr<std::optional<client::MixResumeAt>> mixed =
      client::MixResumedFrom(SavedMixOf(position), ThisMixJob());
  if (!mixed.ok()) {
    return absl::Status(mixed.status().code(),
                        absl::StrCat("--resume ", path, ": ", mixed.status().message()));
  }
  if (!mixed->has_value()) return false;
  const client::MixResumeAt& at = **mixed;
  start->epoch = at.epoch;
  start->batch = 0;
  start->sample_offset = at.sample_offset;
  mix_resume_ = at.resume;
  mix_run_.segments = at.segments;
  mix_run_.segment_schedules = at.segment_schedules;
  return true;
}

absl::Status Trainer::Resume(StartPosition* start) {
  absl::StatusOr<std::string> path = ResolveResumePath(config_.resume);
  if (!path.ok()) return path.status();
  absl::StatusOr<CheckpointPosition> position =
      LoadCheckpoint(*path, *model_, *optimizer_, runtime_.device);
  if (!position.ok()) return position.status();
  const int world = comm_->world_size();
  global_step_ = position->global_step;
  absl::StatusOr<bool> mixed = ResumeMixture(*path, *position, start);
  if (!mixed.ok() || *mixed) return mixed.status();
  if (position->fingerprint != source_->fingerprint()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoint %s was taken with world size %d, batch size %d, job %s; this run "
        "has world size %d, batch size %d, job %s. Resuming would not continue the "
        "same batch sequence; use the same data and job settings (with split sample, "
        "world size and batch size may change; a mixture may change its weights too).",
        *path, position->world_size, position->batch_size, position->fingerprint, world,
        runtime_.batch_size, source_->fingerprint()));
  }
  // The same world size and batch size resume at the same batch; another (elastic) goes on
  // from the samples all ranks consumed in the epoch, dealt over this run's ranks: the
  // rule Python's Loader applies too (run_rules.h). The stream refuses it for split
  // shard, with the reason (common/plan/epoch_plan.h), and judges the offset against
  // the data, so it is not bounded here.
  const client::ResumePosition at = client::ResumeAt(
      client::SavedPosition{position->epoch, position->next_batch, position->sample_offset,
                            position->world_size, position->batch_size},
      world, runtime_.batch_size, std::numeric_limits<int64_t>::max());
  start->epoch = at.epoch;
  start->batch = at.batch;
  start->sample_offset = at.sample_offset;
  return absl::OkStatus();
}

absl::Status Trainer::AgreeOnJob() {
  RankJob mine;
  mine.batches_per_epoch = source_->batches_per_epoch();
  mine.world_size = comm_->world_size();
  mine.batch_size = runtime_.batch_size;
  mine.num_classes = source_->num_classes();
  mine.fingerprint = source_->fingerprint();
  absl::StatusOr<std::vector<torch::Tensor>> gathered =
      comm_->AllGather(mine.Encode().to(runtime_.device));
  if (!gathered.ok()) {
    return absl::Status(gathered.status().code(),
                        absl::StrCat("comparing the job with the other ranks before the first "
                                     "batch failed; a peer rank has probably failed or exited "
                                     "(its own error says why): ",
                                     gathered.status().message()));
  }
  std::vector<RankJob> jobs;
  for (const torch::Tensor& t : *gathered) jobs.push_back(RankJob::Decode(t));
  const std::vector<std::string> differences = JobDifferences(jobs);
  if (differences.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks of this job disagree before the first batch: ", absl::StrJoin(differences, "; "),
      ". Their servers (replicas) serve other data or other byte-changing settings (each "
      "server logs its job fingerprint and settings), or the ranks asked for other jobs: "
      "training on would mix batches or hang at the epoch's end. Give every replica the "
      "same shards and flags"));
}

absl::Status Trainer::Setup(StartPosition* start) {
  const int world = comm_->world_size();
  // First, before anything else is exchanged or any checkpoint is read.
  if (absl::Status agreed = AgreeOnJob(); !agreed.ok()) return agreed;
  model_->To(runtime_.device);
  model_->SetTraining(true);
  std::vector<torch::Tensor> params = model_->Parameters();
  if (params.empty()) return absl::InvalidArgumentError("the model has no trainable parameters");
  optimizer_ = MakeOptimizer(config_, params);
  if (model_->compute_format().precision == Precision::kFp16) {
    loss_scaler_ = std::make_unique<LossScaler>();
  }
  *start = StartPosition();
  if (const client::MixJob job = ThisMixJob(); !job.schedule.empty()) {
    mix_run_ = client::MixRun{{MixtureSegment{0, 0, job.global_batch}},
                              job.schedule,
                              {job.schedule},
                              job.data_fingerprint,
                              job.samples_per_epoch};
  }
  if (!config_.resume.empty()) {
    if (absl::Status s = Resume(start); !s.ok()) return s;
  }

  // Every rank starts from rank 0's parameters and buffers, as DDP's constructor does.
  std::vector<torch::Tensor> state;
  for (auto& [name, t] : model_->NamedParameters()) state.push_back(t);
  for (auto& [name, t] : model_->NamedBuffers()) buffers_.push_back(t);
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  if (absl::Status s = comm_->BroadcastCoalesced(state, 0); !s.ok()) return s;

  if (world > 1) {
    reducer_ = std::make_unique<GradientReducer>(
        comm_, params, static_cast<int64_t>(config_.bucket_mb * 1024 * 1024));
  }
  n_ = source_->batches_per_epoch();
  if (metrics_) {
    metrics_->Write(
        JsonLine()
            .Add("event", "start")
            .Add("rank", comm_->rank())
            .Add("world_size", world)
            .Add("backend", comm_->backend())
            .Add("device", runtime_.device.str())
            .Add("model", model_->Describe())
            .Add("precision", PrecisionName(model_->compute_format().precision))
            .Add("channels_last", model_->compute_format().channels_last)
            .Add("source", source_->Describe())
            .Add("n", n_)
            .Add("epoch", start->epoch)
            .Add("next_batch", start->batch)
            .Add("step", global_step_)
            .Add("resumed_from", config_.resume)
            .Add("sample_offset", start->sample_offset)
            .Add("mix_position", mix_resume_.position)
            .Add("buckets", static_cast<int64_t>(reducer_ ? reducer_->num_buckets() : 0))
            .AddTime("time", UnixTime()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::StepAgreement> Trainer::AgreeOnStep(bool have_batch, int my_signal,
                                                            int64_t epoch, int64_t consumed) {
  torch::Tensor have = torch::tensor({have_batch ? 1.0 : 0.0, my_signal ? 1.0 : 0.0},
                                     torch::TensorOptions().dtype(torch::kFloat64))
                           .to(runtime_.device);
  if (absl::Status s = comm_->AllReduce(have); !s.ok()) {
    // Usually a peer failed (its stream timed out, its server refused it) and exited,
    // which Gloo reports as a closed connection: point at the peer's own error.
    return absl::Status(
        s.code(), absl::StrFormat("epoch %d batch %d: the step agreement with the other ranks "
                                  "failed; a peer rank has probably failed or exited (its own "
                                  "error says why): %s",
                                  epoch, consumed, s.message()));
  }
  const torch::Tensor agreed = have.cpu();
  const int ranks_with_batch = static_cast<int>(std::lround(agreed[0].item<double>()));
  if (agreed[1].item<double>() > 0) return StepAgreement::kStop;
  if (ranks_with_batch == 0) return StepAgreement::kEpochEnd;
  if (ranks_with_batch != comm_->world_size()) {
    return absl::DataLossError(absl::StrFormat(
        "epoch %d batch %d: %d of %d ranks have a batch and the others' streams ended (this "
        "rank: %s); ranks must consume the same number of batches (n = %d)",
        epoch, consumed, ranks_with_batch, comm_->world_size(), have_batch ? "has one" : "ended",
        epoch_n_));
  }
  return StepAgreement::kTrain;
}

absl::Status Trainer::TrainOnBatch(const TrainingBatch& batch, int64_t epoch, torch::Tensor* logits,
                                   torch::Tensor* loss) {
  // DDP's broadcast_buffers: rank 0's BatchNorm statistics before every forward.
  if (comm_->world_size() > 1 && !buffers_.empty()) {
    if (absl::Status s = comm_->BroadcastCoalesced(buffers_, 0); !s.ok()) return s;
  }
  optimizer_->zero_grad();
  if (reducer_) reducer_->PrepareForBackward();
  try {
    *logits = model_->Forward(batch.images);
    torch::Tensor valid = batch.labels >= 0;
    if (valid.any().item<bool>()) {
      *loss = torch::nn::functional::cross_entropy(
          *logits, batch.labels, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
    } else {
      *loss = logits->sum() * 0.0;  // all padding: no signal, but join the all-reduce
    }
    (loss_scaler_ ? loss_scaler_->Scale(*loss) : *loss).backward();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("epoch ", epoch, " batch ", batch.index,
                     ": forward/backward failed: ", std::string(e.what()).substr(0, 500)));
  }
  if (reducer_) {
    if (absl::Status s = reducer_->FinishBackward(); !s.ok()) return s;
  }
  // An fp16 step whose (all-reduced) gradients overflowed is skipped on every rank.
  if (!loss_scaler_ || loss_scaler_->UnscaleAndUpdate(model_->Parameters())) optimizer_->step();
  ++global_step_;
  return absl::OkStatus();
}

absl::Status Trainer::RecordStep(const TrainingBatch& batch, const torch::Tensor& logits,
                                 const torch::Tensor& loss, double wait_seconds,
                                 double step_seconds, double epoch_seconds, int64_t consumed,
                                 EpochTotals* totals) {
  // Loss and top-1 over all ranks: one small all-reduce of sums.
  torch::Tensor stats;
  double local_loss, local_acc;
  {
    torch::NoGradGuard no_grad;
    torch::Tensor valid = batch.labels >= 0;
    torch::Tensor count = valid.sum().to(torch::kFloat64);
    torch::Tensor correct = (logits.argmax(1).eq(batch.labels) & valid).sum().to(torch::kFloat64);
    torch::Tensor loss_total = loss.detach().to(torch::kFloat64) * count;
    stats = torch::stack({loss_total, correct, count}).to(runtime_.device);
    const double c = count.item<double>();
    local_loss = c > 0 ? loss_total.item<double>() / c : 0.0;
    local_acc = c > 0 ? correct.item<double>() / c : 0.0;
  }
  if (absl::Status s = comm_->AllReduce(stats); !s.ok()) return s;
  const torch::Tensor global = stats.cpu();
  const double g_loss_sum = global[0].item<double>(), g_correct = global[1].item<double>(),
               g_count = global[2].item<double>();
  totals->loss_sum += g_loss_sum;
  totals->correct += g_correct;
  totals->count += g_count;
  const int64_t batch_images = batch.images.size(0);
  totals->images_all_ranks += batch_images * comm_->world_size();
  totals->substituted += batch.substituted;
  const double images_per_s = epoch_seconds > 0 ? totals->images_all_ranks / epoch_seconds : 0.0;
  progress_->Update(consumed, images_per_s,
                    totals->count > 0 ? totals->loss_sum / totals->count : 0.0,
                    totals->count > 0 ? totals->correct / totals->count : 0.0);
  if (!metrics_) return absl::OkStatus();
  JsonLine line;
  line.Add("event", "step")
      .Add("rank", comm_->rank())
      .Add("epoch", batch.epoch)
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
  if (reducer_) line.Add("buckets_in_backward", reducer_->launched_during_backward());
  if (config_.log_keys) {
    std::vector<std::string> keys;
    std::vector<std::string> datasets;  // a mixed job's: each sample's dataset
    for (const SampleMeta& m : batch.samples) {
      keys.push_back(m.key);
      datasets.push_back(m.dataset);
    }
    line.Add("keys", keys);
    if (!mix_run_.segments.empty()) line.Add("datasets", datasets);
  }
  metrics_->Write(line);
  return absl::OkStatus();
}

void Trainer::WriteStopped(int signal, int64_t epoch, int64_t next_batch) {
  if (!metrics_) return;
  metrics_->Write(JsonLine()
                      .Add("event", "stopped")
                      .Add("rank", comm_->rank())
                      .Add("signal", signal)
                      .Add("epoch", epoch)
                      .Add("next_batch", next_batch)
                      .Add("step", global_step_)
                      .AddTime("time", UnixTime()));
}

absl::Status Trainer::FinishEpoch(int64_t epoch, int64_t first, int64_t consumed, double seconds,
                                  const EpochTotals& totals, TrainerResult* result) {
  // Every rank must have consumed exactly n batches of this epoch.
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(runtime_.device);
  // ... and how many substitutes each masked, for the progress line.
  torch::Tensor mine = torch::tensor(
      {static_cast<double>(consumed), static_cast<double>(totals.substituted)}, options);
  absl::StatusOr<std::vector<torch::Tensor>> all = comm_->AllGather(mine);
  if (!all.ok()) return all.status();
  std::vector<int64_t> per_rank;
  int64_t substituted_all_ranks = 0;
  bool mismatch = false;
  for (const torch::Tensor& t : *all) {
    const torch::Tensor host = t.cpu();
    per_rank.push_back(static_cast<int64_t>(host[0].item<double>()));
    substituted_all_ranks += static_cast<int64_t>(host[1].item<double>());
    mismatch |= per_rank.back() != epoch_n_;
  }
  const double epoch_loss = totals.count > 0 ? totals.loss_sum / totals.count : 0.0;
  const double epoch_acc = totals.count > 0 ? totals.correct / totals.count : 0.0;
  const double images_per_s = seconds > 0 ? totals.images_all_ranks / seconds : 0.0;
  progress_->FinishEpoch(consumed, images_per_s, epoch_loss, epoch_acc, seconds,
                         substituted_all_ranks);
  if (metrics_) {
    metrics_->Write(JsonLine()
                        .Add("event", "epoch")
                        .Add("rank", comm_->rank())
                        .Add("epoch", epoch)
                        .Add("n", epoch_n_)
                        .Add("batches_per_rank", per_rank)
                        .Add("first_batch", first)
                        .Add("sample_offset", epoch_offset_)
                        .Add("step", global_step_)
                        .Add("loss", epoch_loss)
                        .Add("acc", epoch_acc)
                        .Add("images_per_s", images_per_s)
                        .Add("seconds", seconds)
                        .Add("substituted", totals.substituted)
                        .Add("substituted_all_ranks", substituted_all_ranks)
                        .AddTime("time", UnixTime()));
  }
  if (mismatch) {
    return absl::DataLossError(absl::StrFormat(
        "epoch %d: ranks consumed [%s] batches, expected n = %d on every rank; stopping (DDP "
        "would hang or train on unequal data)",
        epoch, absl::StrJoin(per_rank, ", "), epoch_n_));
  }
  result->epochs_completed = epoch + 1;
  result->last_epoch_loss = epoch_loss;
  result->last_epoch_acc = epoch_acc;
  return Checkpoint(epoch + 1, 0, 0);
}

absl::Status Trainer::RunEpoch(int64_t epoch, int64_t first, int64_t sample_offset, bool* stop,
                               TrainerResult* result) {
  absl::StatusOr<int64_t> n = source_->StartEpochFrom(epoch, first, sample_offset, mix_resume_);
  if (!n.ok()) return n.status();
  epoch_n_ = *n;
  epoch_offset_ = sample_offset;
  progress_->StartEpoch(epoch, config_.epochs, epoch_n_, first);
  const auto epoch_start = Clock::now();
  int64_t consumed = first;
  EpochTotals totals;
  while (true) {
    const auto step_start = Clock::now();
    absl::StatusOr<std::optional<TrainingBatch>> next = source_->Next();
    // Time spent waiting for input: near zero unless the data pipeline stalls training.
    const double wait_seconds = Seconds(Clock::now() - step_start);
    if (!next.ok()) {
      return absl::Status(next.status().code(), absl::StrCat("epoch ", epoch, " batch ", consumed,
                                                             ": ", next.status().message()));
    }
    const int my_signal = runtime_.stop_signal ? runtime_.stop_signal->load() : 0;
    absl::StatusOr<StepAgreement> agreed =
        AgreeOnStep(next->has_value(), my_signal, epoch, consumed);
    if (!agreed.ok()) return agreed.status();
    if (*agreed == StepAgreement::kStop) {
      // The fetched batch is not trained on: the checkpoint points at it.
      if (absl::Status s = Checkpoint(epoch, consumed, epoch_offset_); !s.ok()) return s;
      result->stopped_by_signal = my_signal ? my_signal : SIGTERM;
      WriteStopped(result->stopped_by_signal, epoch, consumed);
      *stop = true;
      return absl::OkStatus();
    }
    if (*agreed == StepAgreement::kEpochEnd) break;
    const TrainingBatch& batch = **next;
    if (batch.index != consumed || batch.epoch != epoch) {
      return absl::DataLossError(
          absl::StrFormat("expected epoch %d batch %d, the source sent epoch %d batch %d", epoch,
                          consumed, batch.epoch, batch.index));
    }
    torch::Tensor logits, loss;
    if (absl::Status s = TrainOnBatch(batch, epoch, &logits, &loss); !s.ok()) return s;
    ++consumed;
    if (absl::Status s =
            RecordStep(batch, logits, loss, wait_seconds, Seconds(Clock::now() - step_start),
                       Seconds(Clock::now() - epoch_start), consumed, &totals);
        !s.ok()) {
      return s;
    }
    if (config_.max_steps > 0 && global_step_ >= config_.max_steps) {
      *stop = true;
      if (absl::Status s = Checkpoint(epoch, consumed, epoch_offset_); !s.ok()) return s;
      if (consumed < epoch_n_) return absl::OkStatus();  // --max-steps ended the run mid-epoch
      break;
    }
    if (config_.ckpt_every > 0 && global_step_ % config_.ckpt_every == 0 && consumed < epoch_n_) {
      if (absl::Status s = Checkpoint(epoch, consumed, epoch_offset_); !s.ok()) return s;
    }
  }
  return FinishEpoch(epoch, first, consumed, Seconds(Clock::now() - epoch_start), totals, result);
}

absl::StatusOr<TrainerResult> Trainer::Run() {
  const int rank = comm_->rank();
  StartPosition start;
  if (absl::Status s = Setup(&start); !s.ok()) return WithRank(rank, s);
  TrainerResult result;
  bool stop = config_.max_steps > 0 && global_step_ >= config_.max_steps;
  for (int64_t epoch = start.epoch; epoch < config_.epochs && !stop; ++epoch) {
    const bool resumed = epoch == start.epoch;
    if (absl::Status s = RunEpoch(epoch, resumed ? start.batch : 0,
                                  resumed ? start.sample_offset : 0, &stop, &result);
        !s.ok()) {
      return WithRank(rank, s);
    }
    if (result.stopped_by_signal != 0) {
      result.global_step = global_step_;
      return result;
    }
    const bool epoch_done = result.epochs_completed == epoch + 1;
    const bool last =
        epoch + 1 == config_.epochs || (config_.max_steps > 0 && global_step_ >= config_.max_steps);
    if (runtime_.evaluator != nullptr && epoch_done &&
        ((epoch + 1) % config_.val_every == 0 || last)) {
      if (absl::Status s = Evaluate(epoch, &result); !s.ok()) return WithRank(rank, s);
    }
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

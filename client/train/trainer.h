// The training loop of one rank: epochs of batches from a BatchSource, forward,
// cross-entropy, backward with bucketed gradient all-reduce, optimizer step, progress,
// metrics, checkpoints, and the end-of-epoch check that every rank consumed n batches.
#ifndef SHARDCAST_CLIENT_TRAIN_TRAINER_H_
#define SHARDCAST_CLIENT_TRAIN_TRAINER_H_

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/reconnect/mix_resume.h"
#include "client/train/batch_source.h"
#include "client/train/checkpoint.h"
#include "client/train/ddp.h"
#include "client/train/evaluator.h"
#include "client/train/metrics.h"
#include "client/train/mixed_precision.h"
#include "client/train/model.h"
#include "client/train/progress.h"
#include "client/train/trainer_config.h"

namespace shardcast::train {

// What exists only once the rank runs, beside the command line's TrainerConfig.
struct TrainerRuntime {
  torch::Device device = torch::kCPU;
  int64_t batch_size = 0;  // as the source deals them: recorded in checkpoints, checked on resume
  // Exact evaluation on a val set (TrainerConfig::val_every); null: none.
  Evaluator* evaluator = nullptr;
  // Set (to the signal number) by a SIGINT/SIGTERM handler: all ranks then stop at the
  // same step boundary and rank 0 checkpoints there. Null: never stop early.
  const std::atomic<int>* stop_signal = nullptr;
};

struct TrainerResult {
  int64_t global_step = 0;
  int64_t epochs_completed = 0;
  double last_epoch_loss = 0;  // averaged over ranks
  double last_epoch_acc = 0;
  // The last evaluation (count == 0: none ran) and the best val top-1 so far.
  EvalSums last_eval;
  double best_val_top1 = -1;
  int64_t best_val_epoch = -1;  // epoch (0-based) whose end gave it
  // Non-zero when the run stopped early on a signal (this rank's, or a peer's: then
  // SIGTERM); the position is in the last checkpoint when --ckpt-dir was given.
  int stopped_by_signal = 0;
};

// Where the best model by val top-1 goes: beside --save's file, ".best" before its
// extension ("model.pt" -> "model.best.pt", "out/final" -> "out/final.best").
std::string BestModelPath(const std::string& save_path);

// Writes the "eval" metrics line and rank 0's progress line of one evaluation;
// shared by training and --eval-only. `epoch` (0-based, of `epochs`) is -1 for
// --eval-only.
void ReportEval(const EvalSums& sums, int64_t epoch, int64_t epochs, double seconds, bool best,
                int rank, MetricsWriter* metrics, ProgressBar* progress);

class Trainer {
 public:
  // REQUIRES: all pointers outlive the Trainer; `metrics` may be null; `progress` is
  // only drawn on (pass a disabled bar on ranks other than 0).
  Trainer(TrainerConfig config, TrainerRuntime runtime, Communicator* comm, BatchSource* source,
          TrainableModel* model, MetricsWriter* metrics, ProgressBar* progress);

  // Trains to the end (epochs or max_steps). Every rank must call it; an error on one
  // rank makes the others fail in their next collective (the peer is gone).
  absl::StatusOr<TrainerResult> Run();

 private:
  // Sums over all ranks of the steps of one epoch run so far.
  struct EpochTotals {
    double loss_sum = 0;
    double correct = 0;
    double count = 0;
    int64_t images_all_ranks = 0;
    int64_t substituted = 0;  // this rank's samples the server substituted (masked)
  };
  // What every rank learns at the top of a step (one all-reduce).
  enum class StepAgreement {
    kTrain,     // every rank has a batch
    kEpochEnd,  // every rank's stream ended
    kStop,      // some rank was asked to stop (signal)
  };

  // The optimizer, the resume position, rank 0's initial state on every rank, the
  // gradient reducer and the "start" metrics line.
  // Where training starts: an epoch, the first batch, and (elastic resume) the
  // global sample position the epoch is dealt from.
  struct StartPosition {
    int64_t epoch = 0;
    int64_t batch = 0;
    int64_t sample_offset = 0;
  };
  absl::Status Setup(StartPosition* start);
  // Before the first batch: every rank's job fingerprint, batches per epoch, world
  // size, batch size and class count, all-gathered (one collective of 552 bytes per
  // rank), must be the same on every rank. Ranks registered at replicas that serve
  // other bytes or other settings would otherwise train on mixed data, or hang at an
  // epoch's end on unequal batch counts. Every rank sees the same table, so every rank
  // fails with the same error (FAILED_PRECONDITION naming each rank and its values).
  absl::Status AgreeOnJob();
  // Loads --resume's checkpoint after checking it continues this batch sequence: the
  // same job, and the same world size and batch size, or (split sample) another one,
  // when the epoch goes on from the global number of samples consumed in it. A mixture
  // also resumes another run of it (another global batch, an earlier resume, new
  // weights): from the global position, with mix_resume (client/reconnect/mix_resume.h).
  absl::Status Resume(StartPosition* start);
  // A mixture resumed at another global batch, after an earlier resume or with new
  // weights: the server replays how the checkpoint's runs drew the sequence
  // (mix_resume), the rule Python's Loader applies too. Sets *start and the run's
  // mixture facts and returns true then; false: the ordinary resume applies.
  absl::StatusOr<bool> ResumeMixture(const std::string& path, const CheckpointPosition& position,
                                     StartPosition* start);
  // This run's mixed job (an empty schedule: none), and a checkpoint's saved run.
  client::MixJob ThisMixJob() const;
  static client::SavedMix SavedMixOf(const CheckpointPosition& position);
  // Runs `epoch` from batch `first` of its deal from `sample_offset`. Sets *stop when
  // the run ends inside it (signal, --max-steps) and fills *result.
  absl::Status RunEpoch(int64_t epoch, int64_t first, int64_t sample_offset, bool* stop,
                        TrainerResult* result);
  // Agrees with the peers on whether this step trains (a rank that ran short would
  // leave its peers waiting in an all-reduce it never joins); the same all-reduce
  // carries stop requests, so all ranks stop at the same step.
  absl::StatusOr<StepAgreement> AgreeOnStep(bool have_batch, int my_signal, int64_t epoch,
                                            int64_t consumed);
  // Forward, backward with overlapped gradient all-reduce, optimizer step.
  absl::Status TrainOnBatch(const TrainingBatch& batch, int64_t epoch, torch::Tensor* logits,
                            torch::Tensor* loss);
  // All-reduces the step's loss and top-1, adds them to `totals`, draws progress and
  // writes the "step" metrics line.
  absl::Status RecordStep(const TrainingBatch& batch, const torch::Tensor& logits,
                          const torch::Tensor& loss, double wait_seconds, double step_seconds,
                          double epoch_seconds, int64_t consumed, EpochTotals* totals);
  // Checks that every rank consumed n batches, writes the "epoch" line, checkpoints.
  absl::Status FinishEpoch(int64_t epoch, int64_t first, int64_t consumed, double seconds,
                           const EpochTotals& totals, TrainerResult* result);
  // `sample_offset`: where `epoch` was dealt from (0 unless elastically resumed).
  absl::Status Checkpoint(int64_t epoch, int64_t next_batch, int64_t sample_offset);
  void WriteStopped(int signal, int64_t epoch, int64_t next_batch);
  // Saves `path` (with "{rank}" as SaveFinalModel does).
  absl::Status SaveModel(const std::string& path);
  absl::Status SaveFinalModel();
  // Runs the evaluator after `epoch`, reports it and saves the best model.
  absl::Status Evaluate(int64_t epoch, TrainerResult* result);

  const TrainerConfig config_;
  const TrainerRuntime runtime_;
  Communicator* comm_;
  BatchSource* source_;
  TrainableModel* model_;
  MetricsWriter* metrics_;
  ProgressBar* progress_;
  // Set up by Setup().
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<GradientReducer> reducer_;  // null for world size 1
  std::unique_ptr<LossScaler> loss_scaler_;   // fp16 only
  std::vector<torch::Tensor> buffers_;        // broadcast from rank 0 before every forward
  int64_t n_ = 0;                             // batches per epoch per rank
  // The epoch running now: its batches per rank (n_, or fewer when elastically
  // resumed) and the global sample position it is dealt from.
  int64_t epoch_n_ = 0;
  int64_t epoch_offset_ = 0;
  int64_t global_step_ = 0;
  // A mixed job: how this run draws the sequence (its checkpoints keep it), and the
  // mix_resume every epoch's stream sends (position 0: none).
  client::MixRun mix_run_;
  client::MixResume mix_resume_;
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_TRAINER_H_

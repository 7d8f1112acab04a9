// shardcast-train: LibTorch data-parallel trainer fed by shardcast-server.
// See `shardcast-train --help` (text in train_options.cc).
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/batch_stream.h"
#include "client/reconnect/run_rules.h"
#include "client/train/batch_source.h"
#include "client/train/checkpoint.h"
#include "client/train/ddp.h"
#include "client/train/evaluator.h"
#include "client/train/launcher.h"
#include "client/train/metrics.h"
#include "client/train/model.h"
#include "client/train/progress.h"
#include "client/train/train_options.h"
#include "client/train/trainer.h"
#include "common/plan/job_config.h"
#include "common/plan/mixture_text.h"

namespace shardcast::train {
namespace {

// The first SIGINT/SIGTERM asks for a clean stop at the next step (all ranks agree on
// it, rank 0 checkpoints); SA_RESETHAND makes a second one end the process at once.
std::atomic<int> g_stop_signal{0};

void RequestStop(int sig) { g_stop_signal.store(sig); }

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = RequestStop;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) ::sigaction(sig, &action, nullptr);
}

// Errors end the process at once: a failed rank must not sit in c10d or gRPC
// destructors waiting for peers that are gone (the launcher or torchrun notices the
// exit and stops the others).
[[noreturn]] void Fail(const absl::Status& status) {
  std::fprintf(stderr, "shardcast-train: error: %s\n", std::string(status.message()).c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  ::_exit(1);
}

absl::StatusOr<torch::Device> ChooseDevice(const TrainOptions& o) {
  const bool cuda = torch::cuda::is_available();
  if (o.device.empty()) {
    if (!cuda) return torch::Device(torch::kCPU);
    return torch::Device(torch::kCUDA,
                         static_cast<c10::DeviceIndex>(
                             o.local_rank % std::max<int64_t>(1, torch::cuda::device_count())));
  }
  if (o.device == "cpu") return torch::Device(torch::kCPU);
  if (!cuda) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", o.device,
                     ": CUDA is not available (this LibTorch build or "
                     "this machine has no GPU); use --device cpu"));
  }
  if (o.device == "cuda") {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.local_rank));
  }
  return torch::Device(o.device);
}

// --precision and --channels-last, or what a user of `device` expects when unset.
absl::StatusOr<ComputeFormat> ChooseComputeFormat(const TrainOptions& o,
                                                  const torch::Device& device) {
  ComputeFormat format;
  format.precision = DefaultPrecision(device);
  if (o.precision.has_value()) {
    absl::StatusOr<Precision> precision = ParsePrecision(*o.precision);
    if (!precision.ok()) return precision.status();
    format.precision = *precision;
  }
  if (absl::Status s = CheckPrecision(format.precision, device); !s.ok()) return s;
  format.channels_last = o.channels_last.value_or(device.is_cuda());
  return format;
}

client::RankJob MakeJob(const TrainOptions& o, const std::string& job_id) {
  client::RankJob job;
  job.job_id = job_id;
  job.rank = o.rank;
  job.world_size = o.world_size;
  job.dataset = o.dataset;
  job.overrides = o.job;  // unset fields stay unset on the wire: the server's defaults apply
  if (!o.mix.empty()) {
    absl::StatusOr<std::vector<MixturePoint>> mix = ParseMixtureFlag(o.mix);
    if (!mix.ok()) Fail(mix.status());  // Validate parsed it already
    job.mix = *std::move(mix);
    job.samples_per_epoch = static_cast<uint64_t>(o.samples_per_epoch);
  }
  return job;
}

// The val job of `train_job`: its own id, the val dataset, split sample with remainder
// pad (every val sample exactly once over the ranks), the center transform with the
// training job's resize and crop. `train` is the training job's registration (null
// with --eval-only: then the flags' resize/crop, or the server's defaults).
client::RankJob MakeValJob(const TrainOptions& o, const std::string& job_id,
                           const client::Registration* train) {
  client::RankJob job;
  job.job_id = job_id + "-val";
  job.rank = o.rank;
  job.world_size = o.world_size;
  job.dataset = o.val_dataset;
  JobOverrides& val = job.overrides;
  val.batch_size = o.val_batch_size > 0 ? std::optional<int32_t>(o.val_batch_size)
                   : train != nullptr   ? std::optional<int32_t>(train->config.plan.batch_size)
                                        : o.job.batch_size;
  val.split = Split::kSample;
  val.remainder = Remainder::kPad;
  val.transform_mode = TransformMode::kCenter;
  val.resize =
      train != nullptr ? std::optional<int32_t>(train->config.transform.resize) : o.job.resize;
  val.crop = train != nullptr ? std::optional<int32_t>(train->config.transform.crop) : o.job.crop;
  return job;
}

// A val set is only comparable when its labels mean the training set's classes.
absl::Status CheckSameClasses(const TrainOptions& o, const client::Registration& train,
                              const client::Registration& val) {
  const bool names_differ = !train.class_names.empty() && !val.class_names.empty() &&
                            train.class_names != val.class_names;
  if (train.num_classes == val.num_classes && !names_differ) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--val-dataset %s has %d classes%s, the training set '%s' has %d%s: a val set must "
      "label the training set's classes",
      o.val_dataset, val.num_classes, names_differ ? " with other names" : "", train.dataset,
      train.num_classes, names_differ ? " (class names differ)" : ""));
}

// shardcast-train trains a classifier: a dataset without labels has nothing it learns
// from (a job without images BatchStream refuses itself).
absl::Status CheckClassifierData(const client::Registration& r) {
  if (r.num_classes == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "dataset '%s' has no labels (num_classes 0): shardcast-train trains a classifier; "
        "read it with the Loader or RankStream instead",
        r.dataset));
  }
  return absl::OkStatus();
}

std::unique_ptr<BatchStream> ConnectOrFail(const TrainOptions& o, client::RankJob job,
                                           torch::Device device) {
  BatchStreamOptions stream_options;
  stream_options.server = o.server;
  stream_options.on_waiting = [](const std::string& notice) {
    std::fprintf(stderr, "shardcast-train: %s\n", notice.c_str());
    std::fflush(stderr);
  };
  absl::StatusOr<client::ClientSecurity> security = client::LoadClientSecurity(o.security);
  if (!security.ok()) Fail(security.status());
  stream_options.credentials = security->credentials;
  stream_options.bearer_token = security->bearer_token;
  const std::string what = !job.mix.empty() ? absl::StrCat(" (mixture ", MixtureText(job.mix), ")")
                           : job.dataset.empty() ? std::string()
                                                 : absl::StrCat(" (dataset '", job.dataset, "')");
  stream_options.job = std::move(job);
  stream_options.prefetch = o.prefetch;
  stream_options.stream_timeout_seconds = absl::ToDoubleSeconds(o.stream_timeout);
  stream_options.on_substitute =
      o.on_substitute == "fail" ? OnSubstitute::kFail : OnSubstitute::kMask;
  // --decode cuda never gets here (Validate refuses it).
  stream_options.decode =
      o.decode == "cpu" ? client::ClientDecode::kCpu : client::ClientDecode::kServer;
  stream_options.decode_threads = o.decode_threads;
  stream_options.on_decode_failure = [](const std::string& notice) {
    std::fprintf(stderr, "shardcast-train: could not decode %s\n", notice.c_str());
    std::fflush(stderr);
  };
  stream_options.device = device;
  stream_options.mean = o.mean;
  stream_options.std = o.std;
  absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(stream_options);
  if (!stream.ok()) {
    Fail(absl::Status(stream.status().code(),
                      absl::StrCat("rank ", o.rank, ": registering with ", o.server, what, ": ",
                                   stream.status().message())));
  }
  if (absl::Status s = CheckClassifierData((*stream)->registration()); !s.ok()) {
    Fail(absl::Status(s.code(), absl::StrCat("rank ", o.rank, ": ", s.message())));
  }
  return *std::move(stream);
}

// ", val top1 ..% (best ..% after epoch K, saved to PATH)" for the final line.
std::string ValSummary(const TrainOptions& o, const TrainerResult& result) {
  if (result.last_eval.count == 0) return "";
  std::string best = absl::StrFormat("best %.2f%% after epoch %d", 100 * result.best_val_top1,
                                     result.best_val_epoch + 1);
  if (!o.save.empty()) absl::StrAppend(&best, ", saved to ", BestModelPath(o.save));
  return absl::StrFormat("; val top1 %.2f%% top5 %.2f%% (%s)", 100 * result.last_eval.top1(),
                         100 * result.last_eval.top5(), best);
}

// --eval-only: the model of --weights or --resume, evaluated once.
int EvaluateOnly(const TrainOptions& o, torch::Device device, TrainableModel* model,
                 Evaluator* evaluator, MetricsWriter* metrics, ProgressBar* progress,
                 std::FILE* summary_out) {
  model->To(device);
  absl::Status loaded;
  if (!o.weights.empty()) {
    loaded = LoadWeights(o.weights, *model);
  } else {
    absl::StatusOr<std::string> path = ResolveResumePath(o.resume);
    loaded = path.ok() ? LoadCheckpointModel(*path, *model, device).status() : path.status();
  }
  if (!loaded.ok()) Fail(loaded);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<EvalSums> sums = evaluator->Run();
  if (!sums.ok()) Fail(sums.status());
  ReportEval(*sums, /*epoch=*/-1, /*epochs=*/0,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
             /*best=*/false, o.rank, metrics, progress);
  if (o.rank == 0) {
    std::fprintf(summary_out,
                 "shardcast-train: eval-only: %s on '%s': val loss %.4f top1 %.2f%% top5 "
                 "%.2f%% (%lld samples)\n",
                 o.weights.empty() ? o.resume.c_str() : o.weights.c_str(), o.val_dataset.c_str(),
                 sums->loss(), 100 * sums->top1(), 100 * sums->top5(),
                 static_cast<long long>(sums->count));
    std::fflush(summary_out);
  }
  return 0;
}

int RunRank(const TrainOptions& o) {
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            std::max(1, o.local_world_size));
  torch::set_num_threads(threads);
  absl::StatusOr<torch::Device> device = ChooseDevice(o);
  if (!device.ok()) Fail(device.status());
  absl::StatusOr<ComputeFormat> compute = ChooseComputeFormat(o, *device);
  if (!compute.ok()) Fail(compute.status());

  // Outputs are opened before the rendezvous: a rank that cannot write them fails
  // before its peers start waiting for it.
  std::unique_ptr<MetricsWriter> metrics;
  if (!o.metrics_path.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsWriter>> writer =
        MetricsWriter::Open(o.metrics_path, o.rank, /*append=*/!o.resume.empty());
    if (!writer.ok()) Fail(writer.status());
    metrics = std::move(*writer);
  }

  Rendezvous rdzv;
  rdzv.rank = o.rank;
  rdzv.world_size = o.world_size;
  rdzv.local_rank = o.local_rank;
  rdzv.master_addr = o.master_addr;
  rdzv.master_port = o.master_port > 0 ? o.master_port : 29500;
  rdzv.timeout = absl::ToChronoMilliseconds(o.rendezvous_timeout);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(rdzv, *device);
  if (!comm.ok()) Fail(comm.status());
  // Without --job-id every run is its own job (rank 0 names it, the others take its
  // name through the rendezvous store): a rerun with other flags never collides with
  // the job an earlier run left on the server.
  absl::StatusOr<std::string> job_id = o.job_id;
  if (o.job_id.empty()) job_id = (*comm)->ShareFromRankZero("job_id", client::NewRunJobId());
  if (!job_id.ok()) Fail(job_id.status());

  std::unique_ptr<BatchSource> source;  // null with --eval-only
  client::Registration train_registration;
  int64_t batch_size = 0;  // as the source deals them: recorded in checkpoints
  if (o.synthetic_batches > 0) {
    SyntheticSpec spec;
    spec.batches_per_epoch = o.synthetic_batches;
    spec.batch_size = o.job.batch_size.value_or(kSyntheticBatchSize);
    spec.image_size = o.job.crop.value_or(kSyntheticImageSize);
    spec.num_classes = o.num_classes;
    spec.seed = o.job.seed.value_or(0);
    spec.rank = o.rank;
    spec.world_size = o.world_size;
    spec.device = *device;
    batch_size = spec.batch_size;
    source = MakeSyntheticBatchSource(spec);
  } else if (!o.eval_only) {
    std::unique_ptr<BatchStream> stream = ConnectOrFail(o, MakeJob(o, *job_id), *device);
    batch_size = stream->registration().config.plan.batch_size;
    train_registration = stream->registration();
    source = MakeServerBatchSource(std::move(stream));
  }
  std::unique_ptr<BatchSource> val_source;
  int64_t val_samples = 0;
  if (!o.val_dataset.empty()) {
    std::unique_ptr<BatchStream> stream = ConnectOrFail(
        o, MakeValJob(o, *job_id, o.eval_only ? nullptr : &train_registration), *device);
    if (!o.eval_only) {
      if (absl::Status s = CheckSameClasses(o, train_registration, stream->registration());
          !s.ok()) {
        Fail(s);
      }
    }
    val_samples = stream->registration().num_samples;
    val_source = MakeServerBatchSource(std::move(stream));
  }
  // What the model is sized by, and what rank 0 describes.
  BatchSource* data = source != nullptr ? source.get() : val_source.get();

  ModelSpec model_spec;
  model_spec.arch = o.arch;
  model_spec.torchscript_path = o.model_path;
  model_spec.num_classes = o.num_classes > 0 ? o.num_classes : data->num_classes();
  // Ranks other than 0 start from different weights on purpose: the broadcast from
  // rank 0 is what makes them equal (as with DDP).
  model_spec.init_seed = o.job.seed.value_or(0) + static_cast<uint64_t>(o.rank);
  absl::StatusOr<std::unique_ptr<TrainableModel>> model = MakeModel(model_spec);
  if (!model.ok()) Fail(model.status());
  (*model)->SetComputeFormat(*compute);

  const bool show_progress = o.rank == 0 && o.progress.value_or(true);
  // --no-progress drops the live bar, not the outcome: rank 0 still prints each epoch's
  // summary and the final line, on stdout, so a log or a container's output says how
  // the run went.
  std::FILE* summary_out = show_progress ? stderr : stdout;
  ProgressBar progress(summary_out, o.rank == 0, ::isatty(STDERR_FILENO) != 0,
                       /*live=*/show_progress);
  if (show_progress) {
    std::fprintf(stderr, "shardcast-train: %d rank(s), %s on %s, %s (%s%s); %s\n", o.world_size,
                 (*comm)->backend().c_str(), device->str().c_str(), (*model)->Describe().c_str(),
                 PrecisionName(compute->precision), compute->channels_last ? ", channels_last" : "",
                 data->Describe().c_str());
  }
  std::unique_ptr<Evaluator> evaluator;
  if (val_source != nullptr) {
    evaluator = std::make_unique<Evaluator>(comm->get(), val_source.get(), model->get(),
                                            val_samples, *device);
  }
  if (o.eval_only)
    return EvaluateOnly(o, *device, model->get(), evaluator.get(), metrics.get(), &progress,
                        summary_out);

  TrainerRuntime runtime;
  runtime.device = *device;
  runtime.batch_size = batch_size;
  runtime.evaluator = evaluator.get();
  runtime.stop_signal = &g_stop_signal;
  InstallStopHandlers();
  Trainer trainer(/*config=*/o, runtime, comm->get(), source.get(), model->get(), metrics.get(),
                  &progress);
  absl::StatusOr<TrainerResult> result = trainer.Run();
  if (!result.ok()) Fail(result.status());
  if (result->stopped_by_signal != 0) {
    std::fprintf(stderr, "\nshardcast-train: rank %d stopped by %s after step %lld%s\n", o.rank,
                 strsignal(result->stopped_by_signal), static_cast<long long>(result->global_step),
                 o.ckpt_dir.empty() ? " (no --ckpt-dir: nothing saved)"
                                    : "; --resume CKPT_DIR continues from there");
    std::fflush(stderr);
    ::_exit(128 + result->stopped_by_signal);
  }
  if (o.rank == 0) {
    std::fprintf(
        summary_out,
        "shardcast-train: done: %lld steps, %lld epochs, last epoch loss %.4f top1 %.2f%%%s\n",
        static_cast<long long>(result->global_step),
        static_cast<long long>(result->epochs_completed), result->last_epoch_loss,
        100 * result->last_epoch_acc, ValSummary(o, *result).c_str());
    std::fflush(summary_out);
  }
  return 0;
}

}  // namespace
}  // namespace shardcast::train

int main(int argc, char** argv) {
  using namespace shardcast::train;
  absl::StatusOr<TrainOptions> options = ParseTrainOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "shardcast-train: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(TrainUsage().c_str(), stdout);
    return 0;
  }
  if (options->nproc_per_node > 0) {
    LaunchSpec spec;
    spec.nproc_per_node = options->nproc_per_node;
    spec.nnodes = options->nnodes;
    spec.node_rank = options->node_rank;
    spec.master_addr = options->master_addr;
    spec.master_port = options->master_port;
    spec.rank_args = ArgsWithoutLauncherFlags(argc, argv);
    return LaunchLocalRanks(spec);
  }
  return RunRank(*options);
}

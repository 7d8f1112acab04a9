// shardcast-train: LibTorch data-parallel trainer fed by shardcast-server.
// See `shardcast-train --help` (text in train_options.cc).
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/batch_stream.h"
#include "client/train/batch_source.h"
#include "client/train/ddp.h"
#include "client/train/launcher.h"
#include "client/train/metrics.h"
#include "client/train/model.h"
#include "client/train/progress.h"
#include "client/train/train_options.h"
#include "client/train/trainer.h"
#include "common/job_config.h"
#include "proto/job_config_proto.h"

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

// "run-<host>-<pid>-<random>": unique per run, readable in the server's status.
std::string GenerateJobId() {
  char host[64] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
  std::random_device entropy;
  return absl::StrFormat("run-%s-%d-%08x", host, ::getpid(), entropy());
}

shardcast::v1::RegisterRequest MakeJob(const TrainOptions& o, const std::string& job_id) {
  shardcast::v1::RegisterRequest job;
  job.set_job_id(job_id);
  job.set_rank(o.rank);
  job.set_world_size(o.world_size);
  // Unset fields stay unset on the wire: the server's defaults apply.
  SetRequestOverrides(o.job, &job);
  return job;
}

int RunRank(const TrainOptions& o) {
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            std::max(1, o.local_world_size));
  torch::set_num_threads(threads);
  absl::StatusOr<torch::Device> device = ChooseDevice(o);
  if (!device.ok()) Fail(device.status());

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
  if (o.job_id.empty()) job_id = (*comm)->ShareFromRankZero("job_id", GenerateJobId());
  if (!job_id.ok()) Fail(job_id.status());

  std::unique_ptr<BatchSource> source;
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
  } else {
    BatchStreamOptions stream_options;
    stream_options.server = o.server;
    absl::StatusOr<client::ClientSecurity> security = client::LoadClientSecurity(o.security);
    if (!security.ok()) Fail(security.status());
    stream_options.credentials = security->credentials;
    stream_options.bearer_token = security->bearer_token;
    stream_options.job = MakeJob(o, *job_id);
    stream_options.prefetch = o.prefetch;
    stream_options.stream_timeout_seconds = absl::ToDoubleSeconds(o.stream_timeout);
    stream_options.device = *device;
    stream_options.mean = o.mean;
    stream_options.std = o.std;
    absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(stream_options);
    if (!stream.ok()) {
      Fail(absl::Status(stream.status().code(),
                        absl::StrCat("rank ", o.rank, ": registering with ", o.server, ": ",
                                     stream.status().message())));
    }
    batch_size = (*stream)->registration().batch_size();
    source = MakeServerBatchSource(std::move(*stream));
  }

  ModelSpec model_spec;
  model_spec.arch = o.arch;
  model_spec.torchscript_path = o.model_path;
  model_spec.num_classes = o.num_classes > 0 ? o.num_classes : source->num_classes();
  // Ranks other than 0 start from different weights on purpose: the broadcast from
  // rank 0 is what makes them equal (as with DDP).
  model_spec.init_seed = o.job.seed.value_or(0) + static_cast<uint64_t>(o.rank);
  absl::StatusOr<std::unique_ptr<TrainableModel>> model = MakeModel(model_spec);
  if (!model.ok()) Fail(model.status());

  const bool show_progress = o.rank == 0 && o.progress.value_or(true);
  // --no-progress drops the live bar, not the outcome: rank 0 still prints each epoch's
  // summary and the final line, on stdout, so a log or a container's output says how
  // the run went.
  std::FILE* summary_out = show_progress ? stderr : stdout;
  ProgressBar progress(summary_out, o.rank == 0, ::isatty(STDERR_FILENO) != 0,
                       /*live=*/show_progress);
  if (show_progress) {
    std::fprintf(stderr, "shardcast-train: %d rank(s), %s on %s, %s; %s\n", o.world_size,
                 (*comm)->backend().c_str(), device->str().c_str(), (*model)->Describe().c_str(),
                 source->Describe().c_str());
  }

  TrainerConfig config;
  config.epochs = o.epochs;
  config.max_steps = o.max_steps;
  config.optimizer = o.optimizer;
  config.lr = o.lr;
  config.betas = o.betas;
  config.momentum = o.momentum;
  config.weight_decay = o.weight_decay;
  config.bucket_mb = o.bucket_mb;
  config.batch_size = batch_size;
  config.ckpt_dir = o.ckpt_dir;
  config.ckpt_every = o.ckpt_every;
  config.ckpt_keep = o.ckpt_keep;
  config.resume_path = o.resume;
  config.save_path = o.save;
  config.log_keys = o.log_keys;
  config.device = *device;
  config.stop_signal = &g_stop_signal;
  InstallStopHandlers();
  Trainer trainer(config, comm->get(), source.get(), model->get(), metrics.get(), &progress);
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
        "shardcast-train: done: %lld steps, %lld epochs, last epoch loss %.4f top1 %.2f%%\n",
        static_cast<long long>(result->global_step),
        static_cast<long long>(result->epochs_completed), result->last_epoch_loss,
        100 * result->last_epoch_acc);
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

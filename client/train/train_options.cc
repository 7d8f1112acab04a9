// Command-line and environment parsing for shardcast-train.
#include "client/train/train_options.h"

#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/base/stream_settings.h"
#include "client/train/mixed_precision.h"
#include "common/flags/flags.h"
#include "common/flags/job_flags.h"
#include "common/plan/mixture_text.h"

namespace shardcast::train {
namespace {

constexpr char kUsageHeader[] =
    R"(shardcast-train: train ResNet-18 (or a TorchScript model) with data-parallel ranks fed
by a shardcast-server.

Usage:
  shardcast-train [--server HOST:PORT] [flags]               one rank (torchrun env or flags)
  shardcast-train --server HOST:PORT --nproc-per-node K ...  K local ranks, like torchrun

Signals: the first SIGINT/SIGTERM stops every rank cleanly at the same step (rank 0 writes
a checkpoint there when --ckpt-dir is set; exit status 128 + signal); a second one ends
the process at once.

)";

absl::Status EnvInt(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  if (!absl::SimpleAtoi(v, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, ": '", v, "' is not an integer"));
  }
  return absl::OkStatus();
}

// Every flag of shardcast-train, storing into `o`. --progress/--no-progress are
// checked against each other after parsing.
void AddTrainFlags(FlagSet* f, TrainOptions* o) {
  f->Section("Data (the job registered with the server; unset = the server's default):");
  f->String({{"--server"},
             "HOST:PORT",
             "shardcast-server address; several replicas as HOST:PORT,HOST:PORT,... or a\n"
             "name with several addresses: this host's first, then spread by rank, the next\n"
             "one when a replica dies or drains (docs/deploy.md, \"Several servers\")"},
            &o->server);
  f->String({{"--job-id"},
             "ID",
             "job name shared by all ranks; give one to attach several launches to one job "
             "(default: a new job per run, named by rank 0)"},
            &o->job_id);
  f->String({{"--dataset"},
             "NAME",
             "the server's dataset to train on (its --dataset NAME=DIR)",
             "the server's \"default\" (--shards), or its only dataset"},
            &o->dataset);
  f->String({{"--mix"},
             "NAME=W,...",
             "train on a mixture of the server's datasets at these weights instead of\n"
             "--dataset (exact proportions at every step; docs/training.md, \"Mixtures\"); a\n"
             "schedule over steps as STEP:NAME=W,...;STEP:NAME=W,... (weights interpolated\n"
             "linearly between points), e.g. 0:a=0.9,b=0.1;5000:a=0.5,b=0.5; or a JSON file\n"
             "(FILE.json): [{\"step\": 0, \"weights\": {\"a\": 0.9, \"b\": 0.1}}, ...] or {\"a\": "
             "0.7, ...}"},
            &o->mix);
  f->Int64({{"--samples-per-epoch"},
            "N",
            "with --mix: the epoch's length in samples",
            "the mixed datasets' usable samples together"},
           &o->samples_per_epoch, 0);
  // The defaults shown are what an unset flag means on a server started without job flags.
  AddJobFlags(f, DefaultJobConfig(), &o->job);
  f->DoubleList({{"--mean"}, "R G B", "per-channel mean: (x/255 - mean) / std on the device"}, 3,
                &o->mean);
  f->DoubleList({{"--std"}, "R G B", "per-channel std (ImageNet's by default, as --mean)"}, 3,
                &o->std);
  f->Int({{"--prefetch"}, "N", "batches buffered ahead of the trainer"}, &o->prefetch, 1);
  f->Duration({{"--stream-timeout"},
               "DURATION",
               "a stream that delivers no batch for this long (counted from the request, or\n"
               "from when the next batch was asked for) is treated as broken: the rank\n"
               "reconnects, and if that brings no batch within another DURATION it fails with\n"
               "an error naming server, job, rank, epoch and batch, which stops every rank.\n"
               "Mind an epoch's first batch waits for decoding; 0 = off (wait forever)"},
              &o->stream_timeout);
  f->Choice({{"--decode"},
             "",
             "where the images are decoded: server sends pixels; cpu has the server send\n"
             "the images as stored with the crop it would make (delivery encoded) and\n"
             "decodes them here, making the same pixels (less server CPU, more here); cuda\n"
             "is not built into shardcast-train (use the Python Loader(decode=\"cuda\"))"},
            {"server", "cpu", "cuda"}, &o->decode);
  f->Int({{"--decode-threads"},
          "N",
          "threads of each rank that decode with --decode cpu",
          "the hardware's threads, at most 8"},
         &o->decode_threads, 0, client::kMaxDecodeThreads);
  f->Choice({{"--on-substitute"},
             "",
             "a sample whose image the server could not decode arrives as a grey\n"
             "substitute: mask leaves it out of the loss and the accuracy (counted in the\n"
             "epoch line and the metrics), fail stops the run naming it"},
            {"mask", "fail"}, &o->on_substitute);
  f->Section("Evaluation (exact: every val sample counted once, on any number of ranks):");
  f->String({{"--val-dataset"},
             "NAME",
             "evaluate on the server's dataset NAME after training epochs: every rank\n"
             "streams its part (split sample, remainder pad, center transform with the\n"
             "training job's resize and crop), padding is masked, and the ranks all-reduce\n"
             "sums of loss, correct@1, correct@5 and count. Its classes must be the\n"
             "training set's. Rank 0 prints val loss/top-1/top-5; metrics get \"eval\"\n"
             "lines; with --save the best model by val top-1 goes to PATH with \".best\"\n"
             "before its extension (model.pt -> model.best.pt)"},
            &o->val_dataset);
  f->Int({{"--val-every"}, "K", "evaluate after every K epochs (and after the last one)"},
         &o->val_every, 1);
  f->Int({{"--val-batch-size"}, "N", "per-rank batch size of evaluation", "--batch-size's"},
         &o->val_batch_size, 0, kMaxBatchSize);
  f->Bool({{"--eval-only"},
           "",
           "no training: evaluate the model of --weights PATH or --resume CKPT on\n"
           "--val-dataset once, print the result and exit"},
          &o->eval_only);
  f->String(
      {{"--weights"}, "PATH", "with --eval-only: a model saved by --save (state_dict) to evaluate"},
      &o->weights);
  f->Section("Security (the server's --tls-cert, --tls-client-ca, --auth-token-file):");
  client::AddClientSecurityFlags(f, &o->security);

  f->Section("Model and optimization:");
  f->Choice({{"--arch"},
             "",
             "built-in model: torchvision's resnet18 architecture and init, or small-cnn\n"
             "(a tiny BN-free CNN for tests and benchmarks)"},
            {"resnet18", "small-cnn"}, &o->arch);
  f->String({{"--model"},
             "PATH",
             "a TorchScript module (torch.jit.save) to train instead; it maps [B,3,H,W]\n"
             "float images to [B,num_classes] logits"},
            &o->model_path);
  f->Int({{"--num-classes"}, "N", "override the class count", "the server's registration reply"},
         &o->num_classes, 0);
  f->Add({{"--device"},
          "cpu|cuda|cuda:N",
          "collectives: NCCL on cuda, Gloo on cpu",
          "cuda (cuda:LOCAL_RANK) if available, else cpu"},
         1, [o](const std::string& flag, const std::vector<std::string>& v) {
           if (v[0] != "cpu" && v[0] != "cuda" && v[0].rfind("cuda:", 0) != 0) {
             return absl::InvalidArgumentError(
                 absl::StrCat(flag, " takes cpu, cuda or cuda:N, got '", v[0], "'"));
           }
           o->device = v[0];
           return absl::OkStatus();
         });
  f->OptionalChoice({{"--precision"},
                     "",
                     "autocast of the forward pass; fp16 adds dynamic loss scaling (CUDA only)",
                     "bf16 on cuda, fp32 on cpu"},
                    PrecisionNames(), &o->precision);
  f->OptionalBool({{"--channels-last"},
                   "",
                   "NHWC weights and inputs (what cuDNN's tensor cores read);\n"
                   "--channels-last=false: NCHW",
                   "on for cuda, off for cpu"},
                  &o->channels_last);
  f->Int({{"--epochs", "--n_epochs", "--n-epochs"}, "N", "epochs"}, &o->epochs, 1);
  f->Double({{"--lr", "-lr"}, "X", "learning rate"}, &o->lr, 0);
  f->DoubleList({{"--betas"}, "B1 B2", "Adam betas"}, 2, &o->betas);
  f->Choice({{"--optimizer"}, "", "sgd uses --momentum"}, {"adam", "sgd"}, &o->optimizer);
  f->Double({{"--momentum"}, "X", "SGD momentum"}, &o->momentum, 0);
  f->Double({{"--weight-decay"}, "X", "weight decay"}, &o->weight_decay, 0);
  f->Double({{"--bucket-mb"}, "X", "gradient all-reduce bucket size in MB"}, &o->bucket_mb, 0);
  f->Int({{"--threads"}, "N", "intra-op CPU threads per rank", "cores / local ranks"}, &o->threads,
         0);
  f->Int64({{"--max-steps"},
            "N",
            "stop once the global step count reaches N (tests, benchmarks); 0 = no limit"},
           &o->max_steps, 0);

  f->Section("Outputs:");
  f->String({{"--metrics"},
             "PATH",
             "JSON lines, one file per rank: \"{rank}\" in PATH is replaced by the rank,\n"
             "otherwise \".rank<R>\" is appended. Events: \"start\", \"step\" (epoch, batch,\n"
             "step, loss, acc, images_per_s, step_s, wait_s = time waiting for input,\n"
             "global_loss, global_acc), \"checkpoint\", \"epoch\" (batches consumed by every\n"
             "rank, n, averages), \"end\". Appended to when resuming."},
            &o->metrics_path);
  f->Bool({{"--log-keys"}, "", "add the sample keys of each batch to \"step\" lines"},
          &o->log_keys);
  f->String({{"--ckpt-dir"},
             "DIR",
             "checkpoints (rank 0 writes DIR/ckpt-e<E>-b<B>.pt and DIR/latest) at every\n"
             "epoch end and every --ckpt-every N steps"},
            &o->ckpt_dir);
  f->Int64({{"--ckpt-every"}, "N", "also checkpoint every N steps; 0 = only at epoch ends"},
           &o->ckpt_every, 0);
  f->Int({{"--ckpt-keep"}, "N", "keep the newest N checkpoint files"}, &o->ckpt_keep, 1);
  f->String({{"--resume"},
             "PATH",
             "continue from a checkpoint file, or a --ckpt-dir (its latest): model,\n"
             "optimizer, epoch, next batch; the stream reopens there. With another world\n"
             "size or batch size (split sample only) the epoch goes on from the samples\n"
             "all ranks consumed in it, dealt over the new ranks: no sample twice, and\n"
             "with remainder pad every one exactly once"},
            &o->resume);
  f->String({{"--save"},
             "PATH",
             "final model: a state_dict in torch.save's zip format (torch.load in Python\n"
             "gives {name: tensor}, keys as torchvision's resnet18), or a TorchScript file\n"
             "for --model. Rank 0 writes it; with \"{rank}\" in PATH every rank writes its\n"
             "own copy."},
            &o->save);
  f->OptionalBool({{"--progress"}, "", "progress bar on rank 0's stderr", "on"}, &o->progress);
  f->Add({{"--no-progress"},
          "",
          "no live progress bar: rank 0 prints only each epoch's summary line and the\n"
          "final line, on stdout"},
         0, [o](const std::string& flag, const std::vector<std::string>& values) {
           if (!values.empty()) return absl::InvalidArgumentError(flag + " takes no value");
           o->progress = false;
           return absl::OkStatus();
         });

  f->Section(
      "Distributed (flags override torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,\n"
      "MASTER_PORT environment variables):");
  f->Int({{"--rank"}, "R", "this process's rank"}, &o->rank, 0);
  f->Int({{"--world-size"}, "W", "number of ranks"}, &o->world_size, 1);
  f->Int({{"--local-rank"}, "L", "rank on this machine (picks cuda:L)"}, &o->local_rank, 0);
  f->String({{"--master-addr"}, "A", "rank 0's address"}, &o->master_addr);
  f->Int({{"--master-port"},
          "P",
          "rank 0's rendezvous port (--nproc-per-node on one machine picks a free one)",
          "29500"},
         &o->master_port, 0, 65535);
  f->Int({{"--nproc-per-node"},
          "K",
          "start K ranks on this machine (re-executing this program with the variables\n"
          "set); signals are forwarded; if one rank fails the others are stopped and the\n"
          "exit status is non-zero"},
         &o->nproc_per_node, 0);
  f->Int({{"--nnodes"}, "N", "with --nproc-per-node on several machines (W = N*K)"}, &o->nnodes, 1);
  f->Int({{"--node-rank"}, "I", "this machine's index with --nnodes"}, &o->node_rank, 0);
  f->Duration({{"--rendezvous-timeout"}, "DURATION", "rendezvous and collective timeout"},
              &o->rendezvous_timeout);

  f->Section("Tests and benchmarks only:");
  f->Int64({{"--synthetic-batches"},
            "N",
            "no server: a deterministic in-memory generator of N batches per epoch per rank\n"
            "(images --crop px, default 32; batch --batch-size, default 32; needs\n"
            "--num-classes)"},
           &o->synthetic_batches, 0);
}

absl::Status Validate(const TrainOptions& o) {
  auto positive = [](const char* flag, double v) {
    return v > 0 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0, got ", v));
  };
  // Above 0, which the flags' inclusive ranges cannot say; WORLD_SIZE may come from the
  // environment.
  for (absl::Status s : {positive("--lr", o.lr), positive("--bucket-mb", o.bucket_mb),
                         positive("--world-size", o.world_size)}) {
    if (!s.ok()) return s;
  }
  if (o.rendezvous_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--rendezvous-timeout must be above 0");
  }
  if (o.nproc_per_node == 0 && (o.rank < 0 || o.rank >= o.world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is not in [0, world size ", o.world_size,
                     ") (from --rank/--world-size or RANK/WORLD_SIZE)"));
  }
  if (o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-rank ", o.node_rank, " is not in [0, --nnodes ", o.nnodes, ")"));
  }
  if (o.server.empty() && o.synthetic_batches == 0) {
    return absl::InvalidArgumentError("--server HOST:PORT: where shardcast-server listens");
  }
  if (o.synthetic_batches > 0 && o.num_classes <= 0) {
    return absl::InvalidArgumentError(
        "--synthetic-batches needs --num-classes N (no server to ask)");
  }
  if (o.betas[0] < 0 || o.betas[0] >= 1 || o.betas[1] < 0 || o.betas[1] >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--betas must lie in [0, 1), got ", o.betas[0], " ", o.betas[1]));
  }
  if (!o.mix.empty()) {
    if (!o.dataset.empty()) {
      return absl::InvalidArgumentError(
          "--mix and --dataset: a job reads one dataset or a mixture; give one of them");
    }
    if (absl::StatusOr<std::vector<MixturePoint>> mix = ParseMixtureFlag(o.mix); !mix.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", mix.status().message()));
    }
  } else if (o.samples_per_epoch != 0) {
    return absl::InvalidArgumentError(
        "--samples-per-epoch is a mixture's epoch length: give --mix");
  }
  if (o.ckpt_every > 0 && o.ckpt_dir.empty()) {
    return absl::InvalidArgumentError("--ckpt-every needs --ckpt-dir DIR");
  }
  for (double s : o.std) {
    if (s <= 0) return absl::InvalidArgumentError("--std values must be > 0");
  }
  if (o.job.image == false) {
    return absl::InvalidArgumentError(
        "--no-image: shardcast-train trains an image classifier (ResNet-18); read a job "
        "without images with the Python Loader (image=False) or RankStream instead");
  }
  if (o.decode == "cuda") {
    // nvJPEG is reached from Python through torchvision's decode_jpeg(device="cuda"), an
    // op of torchvision's library, not LibTorch's; this build links LibTorch alone.
    return absl::InvalidArgumentError(
        "--decode cuda: shardcast-train has no GPU decode: torchvision's decode_jpeg(device="
        "\"cuda\") (nvJPEG) is torchvision's op, not LibTorch's, and this build links "
        "LibTorch alone (building it needs a CUDA LibTorch plus torchvision's C++ library or "
        "the CUDA toolkit's libnvjpeg linked directly); use --decode cpu, or the Python "
        "Loader(decode=\"cuda\")");
  }
  if (!o.val_dataset.empty() && o.synthetic_batches > 0) {
    return absl::InvalidArgumentError(
        "--val-dataset needs a server; --synthetic-batches has no val set");
  }
  if (o.eval_only) {
    if (o.val_dataset.empty()) {
      return absl::InvalidArgumentError(
          "--eval-only needs --val-dataset NAME: what to evaluate on");
    }
    if (o.weights.empty() == o.resume.empty()) {
      return absl::InvalidArgumentError(
          "--eval-only needs exactly one of --weights PATH (a --save model) or --resume CKPT");
    }
  } else if (!o.weights.empty()) {
    return absl::InvalidArgumentError(
        "--weights is for --eval-only (to continue training, use --resume CKPT)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv) {
  TrainOptions o;
  FlagSet flags("shardcast-train");
  AddTrainFlags(&flags, &o);
  // torchrun's environment first; flags override it.
  for (auto [name, field] : {std::pair<const char*, int*>{"RANK", &o.rank},
                             {"WORLD_SIZE", &o.world_size},
                             {"LOCAL_RANK", &o.local_rank},
                             {"LOCAL_WORLD_SIZE", &o.local_world_size},
                             {"MASTER_PORT", &o.master_port}}) {
    if (absl::Status s = EnvInt(name, field); !s.ok()) return s;
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) o.master_addr = addr;
  const bool local_world_from_env = std::getenv("LOCAL_WORLD_SIZE") != nullptr;

  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  o.help = flags.help_requested();
  if (o.help) return o;
  if (flags.Given("--progress") && flags.Given("--no-progress")) {
    return absl::InvalidArgumentError("--progress and --no-progress contradict each other");
  }
  if (!local_world_from_env && o.nproc_per_node == 0) o.local_world_size = 1;
  if (o.nproc_per_node > 0) {
    for (const char* rank_flag : {"--rank", "--world-size", "--local-rank"}) {
      if (flags.Given(rank_flag)) {
        return absl::InvalidArgumentError(
            absl::StrCat(rank_flag,
                         " cannot be combined with --nproc-per-node, which numbers the ranks "
                         "itself"));
      }
    }
  }
  if (absl::Status s = Validate(o); !s.ok()) return s;
  return o;
}

std::vector<std::string> ArgsWithoutLauncherFlags(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool matched = false;
    for (const char* flag : {"--nproc-per-node", "--nnodes", "--node-rank"}) {
      if (arg == flag) {
        ++i;  // skip its value
        matched = true;
      } else if (arg.rfind(std::string(flag) + "=", 0) == 0) {
        matched = true;
      }
    }
    if (!matched) out.push_back(arg);
  }
  return out;
}

std::string TrainUsage() {
  TrainOptions defaults;
  FlagSet flags("shardcast-train");
  AddTrainFlags(&flags, &defaults);
  return absl::StrCat(kUsageHeader, flags.Help());
}

}  // namespace shardcast::train

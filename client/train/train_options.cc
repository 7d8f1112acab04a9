// Command-line and environment parsing for shardcast-train.
#include "client/train/train_options.h"

#include <cstdlib>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardcast::train {
namespace {

template <typename T>
absl::Status ParseNumber(const std::string& flag, const std::string& text, T* out) {
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    ok = absl::SimpleAtod(text, out);
  } else {
    ok = absl::SimpleAtoi(text, out);
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(flag, ": '", text, "' is not a number"));
  return absl::OkStatus();
}

absl::Status ParseList(const std::string& flag, const std::vector<std::string>& values,
                       size_t count, std::vector<double>* out) {
  std::vector<std::string> parts;
  for (const auto& v : values) {
    for (auto piece : absl::StrSplit(v, ',', absl::SkipEmpty())) parts.emplace_back(piece);
  }
  if (parts.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " takes ", count, " numbers, got ", parts.size()));
  }
  out->clear();
  for (const auto& p : parts) {
    double d;
    if (absl::Status s = ParseNumber(flag, p, &d); !s.ok()) return s;
    out->push_back(d);
  }
  return absl::OkStatus();
}

absl::Status EnvInt(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  return ParseNumber(absl::StrCat("environment variable ", name), v, out);
}

// A flag: its spellings, how many values it takes (-1: an optional single value), and
// what to do with them.
struct FlagSpec {
  std::vector<std::string> names;
  int arity;
  std::function<absl::Status(const std::string& flag, const std::vector<std::string>& values)>
      apply;
};

bool LooksLikeFlag(const std::string& s) {
  if (s.size() < 2 || s[0] != '-') return false;
  double unused;
  return !absl::SimpleAtod(s, &unused);  // "-1" is a value, "-lr" a flag
}

std::vector<FlagSpec> MakeSpecs(TrainOptions* o) {
  auto str = [](std::string* field) {
    return [field](const std::string&, const std::vector<std::string>& v) {
      *field = v[0];
      return absl::OkStatus();
    };
  };
  auto num = [](auto* field) {
    return [field](const std::string& flag, const std::vector<std::string>& v) {
      return ParseNumber(flag, v[0], field);
    };
  };
  auto choice = [](std::string* field, std::initializer_list<const char*> allowed) {
    std::vector<const char*> allowed_copy(allowed);
    return [field, allowed_copy](const std::string& flag, const std::vector<std::string>& v) {
      for (const char* a : allowed_copy) {
        if (v[0] == a) {
          *field = v[0];
          return absl::OkStatus();
        }
      }
      std::string list;
      for (const char* a : allowed_copy) absl::StrAppend(&list, list.empty() ? "" : ", ", a);
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", v[0], "' is not one of ", list));
    };
  };
  auto flag_true = [](bool* field) {
    return [field](const std::string&, const std::vector<std::string>&) {
      *field = true;
      return absl::OkStatus();
    };
  };
  std::vector<FlagSpec> specs = {
      {{"--help", "-h"}, 0, flag_true(&o->help)},
      {{"--server"}, 1, str(&o->server)},
      {{"--job-id"}, 1, str(&o->job_id)},
      {{"-b", "--batch-size", "--batch_size"}, 1, num(&o->batch_size)},
      {{"--split"}, 1, choice(&o->split, {"shard", "sample"})},
      {{"--remainder"}, 1, choice(&o->remainder, {"drop", "pad"})},
      {{"--workers", "-w", "--num_workers"}, 1, num(&o->workers)},
      {{"--seed"},
       1,
       [o](const std::string& flag, const std::vector<std::string>& v) {
         uint64_t seed;
         if (absl::Status s = ParseNumber(flag, v[0], &seed); !s.ok()) return s;
         o->seed = seed;
         return absl::OkStatus();
       }},
      {{"--shuffle"},
       -1,
       [o](const std::string& flag, const std::vector<std::string>& v) {
         if (v.empty()) {
           o->shuffle = 0;
           return absl::OkStatus();
         }
         return ParseNumber(flag, v[0], &o->shuffle);
       }},
      {{"--transform"}, 1, choice(&o->transform, {"center", "random"})},
      {{"--resize"}, 1, num(&o->resize)},
      {{"--crop"}, 1, num(&o->crop)},
      {{"--mean"},
       3,
       [o](const std::string& flag, const std::vector<std::string>& v) {
         return ParseList(flag, v, 3, &o->mean);
       }},
      {{"--std"},
       3,
       [o](const std::string& flag, const std::vector<std::string>& v) {
         return ParseList(flag, v, 3, &o->std);
       }},
      {{"--prefetch"}, 1, num(&o->prefetch)},
      {{"--arch"}, 1, choice(&o->arch, {"resnet18", "small-cnn"})},
      {{"--model"}, 1, str(&o->model_path)},
      {{"--num-classes"}, 1, num(&o->num_classes)},
      {{"--device"},
       1,
       [o](const std::string& flag, const std::vector<std::string>& v) {
         if (v[0] != "cpu" && v[0] != "cuda" && v[0].rfind("cuda:", 0) != 0) {
           return absl::InvalidArgumentError(
               absl::StrCat(flag, ": '", v[0], "' is not cpu, cuda or cuda:N"));
         }
         o->device = v[0];
         return absl::OkStatus();
       }},
      {{"--n_epochs", "--epochs", "--n-epochs"}, 1, num(&o->epochs)},
      {{"-lr", "--lr"}, 1, num(&o->lr)},
      {{"--betas"},
       2,
       [o](const std::string& flag, const std::vector<std::string>& v) {
         return ParseList(flag, v, 2, &o->betas);
       }},
      {{"--optimizer"}, 1, choice(&o->optimizer, {"adam", "sgd"})},
      {{"--momentum"}, 1, num(&o->momentum)},
      {{"--weight-decay"}, 1, num(&o->weight_decay)},
      {{"--bucket-mb"}, 1, num(&o->bucket_mb)},
      {{"--threads"}, 1, num(&o->threads)},
      {{"--metrics"}, 1, str(&o->metrics_path)},
      {{"--log-keys"}, 0, flag_true(&o->log_keys)},
      {{"--ckpt-dir"}, 1, str(&o->ckpt_dir)},
      {{"--ckpt-every"}, 1, num(&o->ckpt_every)},
      {{"--ckpt-keep"}, 1, num(&o->ckpt_keep)},
      {{"--resume"}, 1, str(&o->resume)},
      {{"--save"}, 1, str(&o->save)},
      {{"--max-steps"}, 1, num(&o->max_steps)},
      {{"--progress"},
       0,
       [o](const std::string&, const std::vector<std::string>&) {
         o->progress = true;
         return absl::OkStatus();
       }},
      {{"--no-progress"},
       0,
       [o](const std::string&, const std::vector<std::string>&) {
         o->progress = false;
         return absl::OkStatus();
       }},
      {{"--rank"}, 1, num(&o->rank)},
      {{"--world-size"}, 1, num(&o->world_size)},
      {{"--local-rank"}, 1, num(&o->local_rank)},
      {{"--master-addr"}, 1, str(&o->master_addr)},
      {{"--master-port"}, 1, num(&o->master_port)},
      {{"--timeout"}, 1, num(&o->timeout_s)},
      {{"--nproc-per-node"}, 1, num(&o->nproc_per_node)},
      {{"--nnodes"}, 1, num(&o->nnodes)},
      {{"--node-rank"}, 1, num(&o->node_rank)},
      {{"--synthetic-batches"}, 1, num(&o->synthetic_batches)},
  };
  return specs;
}

absl::Status Validate(TrainOptions& o) {
  if (o.help) return absl::OkStatus();
  auto positive = [](const char* flag, double v) {
    return v > 0 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0, got ", v));
  };
  for (absl::Status s : {positive("--batch-size", o.batch_size), positive("--epochs", o.epochs),
                         positive("--lr", o.lr), positive("--bucket-mb", o.bucket_mb),
                         positive("--timeout", o.timeout_s), positive("--prefetch", o.prefetch),
                         positive("--world-size", o.world_size), positive("--nnodes", o.nnodes),
                         positive("--ckpt-keep", o.ckpt_keep)}) {
    if (!s.ok()) return s;
  }
  if (o.nproc_per_node < 0) return absl::InvalidArgumentError("--nproc-per-node must be >= 0");
  if (o.nproc_per_node == 0 && (o.rank < 0 || o.rank >= o.world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is not in [0, world size ", o.world_size,
                     ") (from --rank/--world-size or RANK/WORLD_SIZE)"));
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-rank ", o.node_rank, " is not in [0, --nnodes ", o.nnodes, ")"));
  }
  if (o.server.empty() && o.synthetic_batches == 0) {
    return absl::InvalidArgumentError("--server HOST:PORT: where shardcast-server listens");
  }
  if (o.synthetic_batches < 0)
    return absl::InvalidArgumentError("--synthetic-batches must be >= 0");
  if (o.synthetic_batches > 0 && o.num_classes <= 0) {
    return absl::InvalidArgumentError(
        "--synthetic-batches needs --num-classes N (no server to ask)");
  }
  if (o.betas[0] < 0 || o.betas[0] >= 1 || o.betas[1] < 0 || o.betas[1] >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--betas must lie in [0, 1), got ", o.betas[0], " ", o.betas[1]));
  }
  if (o.ckpt_every < 0 || o.max_steps < 0) {
    return absl::InvalidArgumentError("--ckpt-every and --max-steps must be >= 0");
  }
  if (o.ckpt_every > 0 && o.ckpt_dir.empty()) {
    return absl::InvalidArgumentError("--ckpt-every needs --ckpt-dir DIR");
  }
  for (double s : o.std) {
    if (s <= 0) return absl::InvalidArgumentError("--std values must be > 0");
  }
  return absl::OkStatus();
}

const FlagSpec* Find(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const auto& spec : specs) {
    for (const auto& n : spec.names) {
      if (n == name) return &spec;
    }
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv) {
  TrainOptions o;
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

  std::vector<FlagSpec> specs = MakeSpecs(&o);
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string rank_flag;  // the last of --rank/--world-size/--local-rank given, if any
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    const FlagSpec* spec = Find(specs, name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", args[i], "' (see shardcast-train --help)"));
    }
    std::vector<std::string> values;
    if (inline_value) {
      if (spec->arity == 0) {
        return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      }
      values.push_back(*inline_value);
    } else if (spec->arity == -1) {
      if (i + 1 < args.size() && !LooksLikeFlag(args[i + 1])) values.push_back(args[++i]);
    } else {
      for (int k = 0; k < spec->arity; ++k) {
        if (i + 1 >= args.size() || LooksLikeFlag(args[i + 1])) {
          return absl::InvalidArgumentError(
              absl::StrCat(name, " needs ", spec->arity, spec->arity == 1 ? " value" : " values"));
        }
        values.push_back(args[++i]);
      }
    }
    if (absl::Status s = spec->apply(name, values); !s.ok()) return s;
    if (name == "--rank" || name == "--world-size" || name == "--local-rank") {
      rank_flag = name;
    }
  }
  if (!local_world_from_env && o.nproc_per_node == 0) o.local_world_size = 1;
  if (o.nproc_per_node > 0 && !rank_flag.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        rank_flag, " cannot be combined with --nproc-per-node, which numbers the ranks itself"));
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
  return R"(shardcast-train: train ResNet-18 (or a TorchScript model) with data-parallel ranks fed
by a shardcast-server.

Usage:
  shardcast-train [--server HOST:PORT] [flags]               one rank (torchrun env or flags)
  shardcast-train --server HOST:PORT --nproc-per-node K ...  K local ranks, like torchrun

Data (the job registered with the server; 0/unset = the server's default):
  --server HOST:PORT       shardcast-server address (default 127.0.0.1:50051)
  --job-id ID              job name shared by all ranks (default "default")
  -b, --batch-size B       per-rank batch size (default 32)
  --split shard|sample     shard: webdataset split_by_node semantics (the seed's);
                           sample: exactly-once per-epoch permutation
  --remainder drop|pad     drop the tail, or pad the last batches (padding ignored in the loss)
  -w, --workers K          virtual loader workers per rank (split shard)
  --seed N                 job seed: shard/sample shuffle, random transforms, model init
  --shuffle [N]            shuffle shards each epoch and use a shuffle buffer of N samples
                           (bare --shuffle: server's buffer size; negative: off, the default)
  --transform center|random  Resize+CenterCrop, or RandomResizedCrop+flip
  --resize N, --crop N     transform sizes (server defaults 256 / 224)
  --mean R G B, --std R G B  normalization on the training device (ImageNet's by default)
  --prefetch N             batches buffered ahead of the trainer (default 4)

Model and optimization:
  --arch resnet18|small-cnn  built-in model (default resnet18, torchvision's architecture and
                           init; small-cnn: a tiny BN-free CNN for tests and benchmarks)
  --model PATH             a TorchScript module (torch.jit.save) to train instead; it maps
                           [B,3,H,W] float images to [B,num_classes] logits
  --num-classes N          override the class count (default: the server's registration reply)
  --device cpu|cuda|cuda:N default: cuda (cuda:LOCAL_RANK) if available, else cpu.
                           Collectives: NCCL on cuda, Gloo on cpu.
  --n_epochs, --epochs N   epochs (default 10)
  -lr, --lr X              learning rate (default 1e-4)
  --betas B1 B2            Adam betas (default 0.9 0.999)
  --optimizer adam|sgd     default adam; sgd uses --momentum (default 0.9)
  --momentum X, --weight-decay X
  --bucket-mb X            gradient all-reduce bucket size in MB (default 25)
  --threads N              intra-op CPU threads per rank (default: cores / local ranks)
  --max-steps N            stop once the global step count reaches N (tests, benchmarks)

Outputs:
  --metrics PATH           JSON lines, one file per rank: "{rank}" in PATH is replaced by the
                           rank, otherwise ".rank<R>" is appended. Events: "start", "step"
                           (epoch, batch, step, loss, acc, images_per_s, step_s, wait_s = time
                           waiting for input, global_loss, global_acc), "checkpoint", "epoch"
                           (batches consumed by every rank, n, averages), "end". Appended to
                           when resuming.
  --log-keys               add the sample keys of each batch to "step" lines
  --ckpt-dir DIR           checkpoints (rank 0 writes DIR/ckpt-e<E>-b<B>.pt and DIR/latest)
                           at every epoch end and every --ckpt-every N steps
  --ckpt-keep N            keep the newest N checkpoint files (default 3)
  --resume PATH            continue from a checkpoint file, or a --ckpt-dir (its latest):
                           model, optimizer, epoch, next batch; the stream reopens there
  --save PATH              final model: a state_dict in torch.save's zip format (torch.load in
                           Python gives {name: tensor}, keys as torchvision's resnet18), or a
                           TorchScript file for --model. Rank 0 writes it; with "{rank}" in
                           PATH every rank writes its own copy.
  --progress, --no-progress  progress bar on rank 0's stderr (default on)

Distributed (flags override torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT environment variables):
  --rank R, --world-size W, --local-rank L, --master-addr A (default 127.0.0.1),
  --master-port P (default 29500; --nproc-per-node on one machine picks a free port)
  --nproc-per-node K       start K ranks on this machine (re-executing this program with
                           the variables set); signals are forwarded; if one rank fails the
                           others are stopped and the exit status is non-zero
  --nnodes N, --node-rank I  with --nproc-per-node on several machines (W = N*K)
  --timeout SECONDS        rendezvous and collective timeout (default 300)

Signals: the first SIGINT/SIGTERM stops every rank cleanly at the same step (rank 0 writes
a checkpoint there when --ckpt-dir is set; exit status 128 + signal); a second one ends
the process at once.

Tests and benchmarks only:
  --synthetic-batches N    no server: a deterministic in-memory generator of N batches per
                           epoch per rank (images --crop px, default 32; needs --num-classes)
)";
}

}  // namespace shardcast::train

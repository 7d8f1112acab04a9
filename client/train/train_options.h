// shardcast-train's command line: flags (mirroring the seed's -b, --n_epochs, -lr,
// --betas, --shuffle where they overlap), torchrun's environment, and --help.
#ifndef SHARDCAST_CLIENT_TRAIN_TRAIN_OPTIONS_H_
#define SHARDCAST_CLIENT_TRAIN_TRAIN_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/rpc/client_security.h"
#include "client/train/trainer_config.h"
#include "common/plan/job_config.h"

namespace shardcast::train {

// The command line. The training loop's own settings (epochs, optimizer, checkpoints,
// --val-every, ...) are the TrainerConfig it is: the flags fill them there and the
// Trainer takes them as parsed.
struct TrainOptions : TrainerConfig {
  // Data (the server's job).
  std::string server = "127.0.0.1:50051";  // host:port (shardcast-server's default --listen)
  std::string job_id;                      // empty: a new job per run (rank 0 names it)
  std::string dataset;                     // the server's dataset to train on; empty = its default
  // --mix: a mixture of the server's datasets instead of --dataset (mixture_text.h's
  // spelling), and --samples-per-epoch, its epoch length (0: the server's default).
  std::string mix;
  int64_t samples_per_epoch = 0;
  // What the job asks of the server (common/flags/job_flags.h); unset = the server's default.
  JobOverrides job;
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::vector<double> std = {0.229, 0.224, 0.225};
  int prefetch = 4;
  // --tls-ca, --tls-cert/--tls-key, --auth-token-file (or SHARDCAST_TOKEN).
  client::ClientSecurityFlags security;
  // Progress deadline of each rank's stream (StreamSettings::stream_timeout_seconds);
  // zero = off.
  absl::Duration stream_timeout = absl::Minutes(2);
  // Where the images are decoded: "server" (delivery server: pixels on the wire), "cpu"
  // (delivery encoded, decoded by this process on `decode_threads` threads: the same
  // pixels) or "cuda" (refused: see Validate).
  std::string decode = "server";
  int decode_threads = 0;  // 0: the hardware's threads, at most 8
  // What a sample the server could not decode (sent as a substitute) becomes: "mask"
  // (left out of loss and accuracy, counted) or "fail" (the rank stops, naming it).
  std::string on_substitute = "mask";

  // Exact evaluation (client/train/evaluator.h).
  std::string val_dataset;     // the server's dataset to evaluate on; empty = none
  int32_t val_batch_size = 0;  // per rank; 0 = the training batch size
  bool eval_only = false;      // evaluate --weights or --resume's model, no training
  std::string weights;         // a state_dict written by --save (for --eval-only)

  // Model and optimization.
  std::string arch = "resnet18";
  std::string model_path;  // TorchScript module instead of `arch`
  int num_classes = 0;     // 0 = from the server
  std::string device;      // "" = cuda if available else cpu
  // Unset: DefaultPrecision(device) (bf16 on CUDA, fp32 on the CPU) and channels_last
  // exactly on CUDA.
  std::optional<std::string> precision;
  std::optional<bool> channels_last;
  int threads = 0;  // intra-op threads per rank; 0 = cores / local ranks

  // Outputs.
  std::string metrics_path;
  std::optional<bool> progress;  // unset: on for rank 0

  // Distributed (flags override torchrun's env vars).
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 = unset (29500 unless --nproc-per-node picks a free one)
  absl::Duration rendezvous_timeout = absl::Minutes(5);  // rendezvous and collectives
  int nproc_per_node = 0;  // > 0: launch this many local ranks (see launcher.h)
  int nnodes = 1;
  int node_rank = 0;

  // Tests and benchmarks only: a deterministic in-memory batch generator instead of a
  // server, this many batches per epoch per rank.
  int64_t synthetic_batches = 0;

  bool help = false;
};

// Batch size and image size of the synthetic source when --batch-size / --crop are
// not given (there is no server to take a default from).
inline constexpr int32_t kSyntheticBatchSize = 32;
inline constexpr int32_t kSyntheticImageSize = 32;

// Parses argv (argv[0] skipped) on top of the environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Errors name the flag and the problem.
absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv);

// --help: the usage header, then every flag by section with its default.
std::string TrainUsage();

// The argument list without --nproc-per-node/--nnodes/--node-rank (and their values),
// for the launcher to re-exec each local rank with.
std::vector<std::string> ArgsWithoutLauncherFlags(int argc, char** argv);

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_TRAIN_OPTIONS_H_

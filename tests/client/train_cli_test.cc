// shardcast-train's command line and launcher: the seed's flags and torchrun's
// environment parse as documented, bad flags are refused with a message naming them,
// --nproc-per-node stops the other ranks when one fails, a rank whose server stalls
// fails on --stream-timeout and takes its DDP peer down with it, and a TorchScript
// --model trains data-parallel and is saved as TorchScript.
#include <stdlib.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "absl/strings/str_cat.h"
#include "client/train/metrics.h"
#include "client/train/train_options.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/free_port.h"
#include "tests/support/help_check.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trainer_process.h"

namespace shardcast::train {
namespace {

using testing_util::BinaryPath;
using testing_util::ChildProcess;
using testing_util::ReadWholeFile;
using testing_util::RunTrainer;
using testing_util::TempDir;
using testing_util::TrainerExit;

absl::StatusOr<TrainOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "shardcast-train");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseTrainOptions(static_cast<int>(argv.size()), argv.data());
}

class TrainOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
      unsetenv(v);
    }
  }
  void TearDown() override { SetUp(); }
};

TEST_F(TrainOptionsTest, SeedFlagsParse) {
  absl::StatusOr<TrainOptions> o = Parse({"-b", "8", "--n_epochs", "3", "-lr", "0.001", "--betas",
                                          "0.8", "0.99", "--shuffle", "100", "--server", "h:1"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->job.batch_size, 8);
  EXPECT_EQ(o->epochs, 3);
  EXPECT_DOUBLE_EQ(o->lr, 0.001);
  EXPECT_EQ(o->betas, (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(o->job.shuffle_shards, true);
  EXPECT_EQ(o->job.shuffle_buffer, 100);
  EXPECT_EQ(o->server, "h:1");
  absl::StatusOr<TrainOptions> aliases = Parse({"--batch_size", "4", "--epochs", "2", "--lr", "0.5",
                                                "-w", "3", "--rendezvous-timeout", "90s"});
  ASSERT_TRUE(aliases.ok()) << aliases.status();
  EXPECT_EQ(aliases->job.batch_size, 4);
  EXPECT_EQ(aliases->epochs, 2);
  EXPECT_EQ(aliases->job.workers, 3);
  EXPECT_EQ(aliases->rendezvous_timeout, absl::Seconds(90));
  // Members beside the image pass to the registration as the job's fields.
  absl::StatusOr<TrainOptions> fields = Parse({"--fields", "txt,json?"});
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_TRUE(fields->job.fields.has_value());
  EXPECT_EQ(FieldSpecsString(*fields->job.fields), "txt,json?");
  EXPECT_FALSE(fields->job.image.has_value());
  // Defaults: the seed's Adam settings, ImageNet normalization; every job setting
  // left to the server.
  absl::StatusOr<TrainOptions> d = Parse({});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ(d->lr, 1e-4);
  EXPECT_EQ(d->betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(d->optimizer, "adam");
  EXPECT_FALSE(d->job.batch_size.has_value());
  EXPECT_FALSE(d->job.shuffle_shards.has_value());
  EXPECT_FALSE(d->job.crop.has_value());
  EXPECT_EQ(d->rendezvous_timeout, absl::Minutes(5));
  EXPECT_EQ(d->job_id, "");  // a new job per run
  EXPECT_DOUBLE_EQ(d->bucket_mb, 25);
  EXPECT_EQ(d->mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(d->stream_timeout, absl::Minutes(2));
  absl::StatusOr<TrainOptions> timeouts = Parse({"--stream-timeout", "2s"});
  ASSERT_TRUE(timeouts.ok()) << timeouts.status();
  EXPECT_EQ(timeouts->stream_timeout, absl::Seconds(2));
  absl::StatusOr<TrainOptions> off = Parse({"--stream-timeout", "0"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->stream_timeout, absl::ZeroDuration());
}

TEST_F(TrainOptionsTest, MixReadsAJsonScheduleFile) {
  TempDir dir;
  const std::string schedule = dir.path() + "/schedule.json";
  std::ofstream(schedule) << R"([{"step": 0, "weights": {"a": 0.9, "b": 0.1}},
                                 {"step": 5000, "weights": {"a": 0.5, "b": 0.5}}])";
  absl::StatusOr<TrainOptions> o = Parse({"--mix", schedule, "--samples-per-epoch", "96"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->mix, schedule);  // read again, the same way, where the job is built

  const std::string bad = dir.path() + "/bad.json";
  std::ofstream(bad) << R"([{"step": 0, "weights": {"a": "0.9"}}])";
  o = Parse({"--mix", bad});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(),
            "--mix: " + bad + ": point 0: the weight of 'a' is a string, not a number");
  o = Parse({"--mix", dir.path() + "/missing.json"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("missing.json"), absl::string_view::npos) << o.status();
}

TEST_F(TrainOptionsTest, DecodeIsServerUnlessToldCpu) {
  absl::StatusOr<TrainOptions> o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->decode, "server");
  EXPECT_EQ(o->decode_threads, 0);
  o = Parse({"--decode", "cpu", "--decode-threads", "3"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->decode, "cpu");
  EXPECT_EQ(o->decode_threads, 3);
}

TEST_F(TrainOptionsTest, OptionalAndNegativeValues) {
  absl::StatusOr<TrainOptions> bare = Parse({"--shuffle", "--log-keys"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->job.shuffle_shards, true);  // on, with the server's buffer size
  EXPECT_FALSE(bare->job.shuffle_buffer.has_value());
  EXPECT_TRUE(bare->log_keys);
  absl::StatusOr<TrainOptions> off = Parse({"--shuffle", "-1"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->job.shuffle_shards, false);
  EXPECT_EQ(off->job.shuffle_buffer, 0);
  absl::StatusOr<TrainOptions> eq =
      Parse({"--lr=0.5", "--mean=0.5,0.5,0.5", "--std", "1", "2", "3"});
  ASSERT_TRUE(eq.ok()) << eq.status();
  EXPECT_DOUBLE_EQ(eq->lr, 0.5);
  EXPECT_EQ(eq->mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(eq->std, (std::vector<double>{1, 2, 3}));
  // Unset, precision and memory format follow the device (mixed_precision.h).
  EXPECT_FALSE(bare->precision.has_value());
  EXPECT_FALSE(bare->channels_last.has_value());
  absl::StatusOr<TrainOptions> mixed = Parse({"--precision", "fp16", "--channels-last=false"});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->precision, "fp16");
  EXPECT_EQ(mixed->channels_last, false);
}

TEST_F(TrainOptionsTest, TorchrunEnvironmentAndFlagOverride) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.0.0.5", 1);
  setenv("MASTER_PORT", "29555", 1);
  absl::StatusOr<TrainOptions> env = Parse({});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.5");
  EXPECT_EQ(env->master_port, 29555);
  absl::StatusOr<TrainOptions> flags = Parse({"--rank", "3", "--master-port", "1234"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->rank, 3);
  EXPECT_EQ(flags->master_port, 1234);
  setenv("RANK", "x", 1);
  EXPECT_FALSE(Parse({}).ok());
}

TEST_F(TrainOptionsTest, BadFlagsAreRefusedByName) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--bogus"}, "unknown flag --bogus"},
           {{"--betas", "0.9"}, "--betas needs 2 values"},
           {{"--optimizer", "lamb"}, "--optimizer takes adam or sgd, got 'lamb'"},
           {{"--on-substitute", "keep"}, "--on-substitute takes mask or fail, got 'keep'"},
           {{"--decode", "gpu"}, "--decode takes server or cpu or cuda, got 'gpu'"},
           {{"--decode", "cuda"}, "--decode cuda: shardcast-train has no GPU decode"},
           {{"--decode-threads", "-1"}, "--decode-threads takes an integer in [0, 1024]"},
           {{"--on-substitute", ""}, "--on-substitute takes mask or fail, got ''"},
           {{"-b", "x"}, "-b takes an integer in [1, 65536], got 'x'"},
           {{"-b", "0"}, "-b takes an integer in [1, 65536], got '0'"},
           {{"-b", "4", "--batch-size", "8"}, "--batch-size given twice"},
           {{"--split", "node"}, "--split: unknown split 'node': expected shard or sample"},
           {{"--crop", "0"}, "--crop takes an integer in [1, 8192], got '0'"},
           {{"--lr", "0"}, "--lr must be > 0, got 0"},
           {{"--timeout", "300"}, "unknown flag --timeout"},
           {{"--rendezvous-timeout", "soon"}, "--rendezvous-timeout: 'soon' is not a duration"},
           {{"--rendezvous-timeout", "0"}, "--rendezvous-timeout must be above 0"},
           {{"--stream-timeout", "-1s"}, "--stream-timeout: '-1s' is not a duration >= 0"},
           {{"--stream-timeout", "soon"}, "--stream-timeout: 'soon' is not a duration"},
           {{"--progress", "--no-progress"}, "--progress and --no-progress contradict"},
           {{"--rank", "2", "--world-size", "2"}, "rank 2 is not in [0, world size 2)"},
           {{"--ckpt-every", "5"}, "--ckpt-every needs --ckpt-dir"},
           {{"--synthetic-batches", "3"}, "--synthetic-batches needs --num-classes"},
           {{"--device", "tpu"}, "--device takes cpu, cuda or cuda:N, got 'tpu'"},
           {{"--precision", "fp8"}, "--precision takes fp32 or bf16 or fp16, got 'fp8'"},
           {{"--channels-last=often"}, "--channels-last takes true or false, got 'often'"},
           {{"--betas", "0.9", "1.5"}, "--betas must lie in [0, 1)"},
           {{"--log-keys=maybe"}, "--log-keys takes true or false, got 'maybe'"},
           {{"--no-progress=1"}, "--no-progress takes no value"},
           {{"--fields", "txt", "--no-image"},
            "--no-image: shardcast-train trains an image classifier (ResNet-18); read a job "
            "without images with the Python Loader (image=False) or RankStream instead"},
           {{"--fields", "txt,a/b"}, "--fields: "},
           {{"--nproc-per-node", "2", "--rank", "1"},
            "--rank cannot be combined with --nproc-per-node"},
       }) {
    absl::StatusOr<TrainOptions> o = Parse(c.args);
    ASSERT_FALSE(o.ok()) << c.args[0];
    EXPECT_NE(std::string(o.status().message()).find(c.message), std::string::npos)
        << o.status().message();
  }
}

TEST_F(TrainOptionsTest, LauncherFlagsAreStrippedForRanks) {
  std::vector<std::string> args = {"shardcast-train", "--nproc-per-node", "2", "-b",        "4",
                                   "--nnodes=1",      "--node-rank",      "0", "--log-keys"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  EXPECT_EQ(ArgsWithoutLauncherFlags(static_cast<int>(argv.size()), argv.data()),
            (std::vector<std::string>{"-b", "4", "--log-keys"}));
}

TEST(TrainHelpTest, ListsEveryFlag) {
  testing_util::ExpectHelpListsEveryFlag(
      {BinaryPath("client/shardcast-train")},
      {"--server", "--job-id", "--dataset", "--val-dataset", "--val-every", "--val-batch-size",
       "--eval-only", "--weights", "--batch-size", "--split", "--remainder", "--workers", "--seed",
       "--shuffle", "--shuffle-shards", "--shuffle-buffer", "--block-size", "--transform",
       "--resize", "--crop", "--mean", "--std", "--prefetch", "--stream-timeout", "--tls-ca",
       "--tls-cert", "--tls-key", "--auth-token-file", "--arch", "--model", "--num-classes",
       "--device", "--precision", "--channels-last", "--epochs", "--lr", "--betas", "--optimizer",
       "--momentum", "--weight-decay", "--bucket-mb", "--threads", "--max-steps", "--metrics",
       "--log-keys", "--ckpt-dir", "--ckpt-every", "--ckpt-keep", "--resume", "--save",
       "--progress", "--no-progress", "--rank", "--world-size", "--local-rank", "--master-addr",
       "--master-port", "--nproc-per-node", "--nnodes", "--node-rank", "--rendezvous-timeout",
       "--synthetic-batches",
       // The seed's spellings.
       "-b", "--batch_size", "--n_epochs", "-lr", "-w", "--num_workers"});
  const testing_util::CommandOutput out = testing_util::RunShellCapture(
      testing_util::ShellCommand({BinaryPath("client/shardcast-train"), "--help"}));
  for (const char* text : {"Usage:", "Data (the job registered with the server",
                           "Model and optimization:", "Outputs:", "Distributed (flags override",
                           "Tests and benchmarks only:", "Signals:"}) {
    EXPECT_NE(out.out.find(text), std::string::npos) << text;
  }
}

TEST(MetricsPathTest, RankPlaceholderOrSuffix) {
  EXPECT_EQ(MetricsWriter::PathForRank("/x/m.{rank}.jsonl", 3), "/x/m.3.jsonl");
  EXPECT_EQ(MetricsWriter::PathForRank("/x/m.jsonl", 0), "/x/m.jsonl.rank0");
  EXPECT_EQ(JsonLine().Add("k", "a\"b\n").Add("v", std::vector<int64_t>{1, 2}).str(),
            "{\"k\":\"a\\\"b\\n\",\"v\":[1,2]}");
}

TEST(TrainLauncherTest, OneFailingRankStopsTheOthers) {
  TempDir dir;
  // Rank 1 cannot open its metrics file and fails before the rendezvous; rank 0 would
  // wait there for 300 s unless the launcher stops it.
  std::filesystem::create_directories(dir.path() + "/ok0");
  const TrainerExit exit =
      RunTrainer({"--synthetic-batches", "2", "--num-classes", "2", "--arch", "small-cnn", "--crop",
                  "8", "--nproc-per-node", "2", "--rendezvous-timeout", "5m", "--metrics",
                  dir.path() + "/ok{rank}/m.jsonl"},
                 dir.path() + "/out", dir.path() + "/err", std::chrono::seconds(60));
  ASSERT_TRUE(exit.started.ok()) << exit.started;
  ASSERT_TRUE(exit.wait_status.has_value()) << "the launcher did not stop rank 0";
  EXPECT_TRUE(exit.code() == 1) << *exit.wait_status;
  const std::string err = ReadWholeFile(dir.path() + "/err");
  EXPECT_NE(err.find("--metrics: cannot open " + dir.path() + "/ok1/m.jsonl"), std::string::npos)
      << err;
  EXPECT_NE(err.find("rank 1 exited with status 1; stopping the other ranks"), std::string::npos)
      << err;
}

size_t CountLines(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST(TrainLauncherTest, SigtermStopsAllRanksAtOneStepWithACheckpointToResumeFrom) {
  TempDir dir;
  const std::vector<std::string> common = {BinaryPath("client/shardcast-train"),
                                           "--synthetic-batches",
                                           "100000",
                                           "--num-classes",
                                           "2",
                                           "--arch",
                                           "small-cnn",
                                           "--crop",
                                           "8",
                                           "-b",
                                           "2",
                                           "--threads",
                                           "1",
                                           "--no-progress",
                                           "--ckpt-dir",
                                           dir.path() + "/ckpt",
                                           "--metrics",
                                           dir.path() + "/m.{rank}.jsonl"};
  std::vector<std::string> argv = common;
  argv.insert(argv.end(), {"--nproc-per-node", "2"});
  ChildProcess launcher;
  ASSERT_TRUE(launcher.Start(argv, dir.path() + "/out", dir.path() + "/err").ok());
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (CountLines(ReadWholeFile(dir.path() + "/m.1.jsonl"), "\"event\":\"step\"") < 3 &&
         std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(launcher.WaitFor(std::chrono::milliseconds(10)).has_value())
        << ReadWholeFile(dir.path() + "/err");
  }
  kill(launcher.pid(), SIGTERM);
  std::optional<int> status = launcher.WaitFor(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value()) << "ranks did not stop";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + SIGTERM) << *status;
  // Both ranks stopped at the same position; rank 0 checkpointed exactly there.
  std::string stopped[2];
  for (int r = 0; r < 2; ++r) {
    const std::string metrics = ReadWholeFile(absl::StrCat(dir.path(), "/m.", r, ".jsonl"));
    const size_t at = metrics.find("\"event\":\"stopped\"");
    ASSERT_NE(at, std::string::npos) << "rank " << r << ":\n" << ReadWholeFile(dir.path() + "/err");
    stopped[r] = metrics.substr(metrics.find("\"epoch\"", at));
    stopped[r] = stopped[r].substr(0, stopped[r].find(",\"time\""));
  }
  EXPECT_EQ(stopped[0], stopped[1]);
  const std::string checkpoint = ReadWholeFile(dir.path() + "/m.0.jsonl");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(stopped[0], m, std::regex("\"next_batch\":(\\d+),\"step\":(\\d+)")))
      << stopped[0];
  const std::string next_batch = m[1], step = m[2];
  EXPECT_NE(checkpoint.find(absl::StrCat("\"event\":\"checkpoint\",\"rank\":0,\"epoch\":0,"
                                         "\"next_batch\":",
                                         next_batch, ",\"step\":", step)),
            std::string::npos)
      << checkpoint;
  // It resumes from there.
  argv = common;
  argv.insert(argv.end(), {"--nproc-per-node", "2", "--resume", dir.path() + "/ckpt", "--max-steps",
                           absl::StrCat(std::stoi(step) + 2)});
  ChildProcess resumed;
  ASSERT_TRUE(resumed.Start(argv, dir.path() + "/out2", dir.path() + "/err2").ok());
  status = resumed.WaitFor(std::chrono::minutes(2));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << ReadWholeFile(dir.path() + "/err2");
  EXPECT_NE(ReadWholeFile(dir.path() + "/m.1.jsonl")
                .find(absl::StrCat("\"epoch\":0,\"next_batch\":", next_batch, ",\"step\":", step)),
            std::string::npos);
}

TEST(TrainProgressTest, NoProgressStillPrintsEpochSummariesAndTheFinalLine) {
  TempDir dir;
  const TrainerExit exit =
      RunTrainer({"--synthetic-batches", "3", "--num-classes", "2", "--arch", "small-cnn", "--crop",
                  "8", "-b", "2", "--epochs", "2", "--threads", "1", "--no-progress"},
                 dir.path() + "/out", dir.path() + "/err", std::chrono::minutes(2));
  ASSERT_TRUE(exit.started.ok()) << exit.started;
  ASSERT_TRUE(exit.wait_status.has_value());
  const std::string out = ReadWholeFile(dir.path() + "/out");
  const std::string err = ReadWholeFile(dir.path() + "/err");
  ASSERT_TRUE(exit.code() == 0) << err;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("(^|\n)epoch 1/2: 3/3 batches \\| [0-9.]+ img/s \\| loss [0-9.]+ \\| top1 "
                      "[0-9.]+% \\| [0-9.]+ s\n")))
      << out;
  EXPECT_NE(out.find("\nepoch 2/2: 3/3 batches | "), std::string::npos) << out;
  EXPECT_NE(out.find("shardcast-train: done: 6 steps, 2 epochs, last epoch loss "),
            std::string::npos)
      << out;
  // No live bar anywhere.
  for (const std::string& text : {out, err}) {
    EXPECT_EQ(text.find("epoch 1/2 ["), std::string::npos) << text;
  }
}

TEST(TrainStreamTimeoutTest, AStalledServerFailsItsRankAndTheDdpPeerWithIt) {
  // Two ranks started as torchrun would, each fed by its own server: only rank 1's
  // server is stopped, as when one data host hangs. Rank 0 meanwhile waits for rank 1
  // in the per-step all-reduce; with a collective timeout of 5 min it must fail because
  // its peer exited, not because that timeout ran out.
  TempDir dir;
  const std::string shards = dir.path() + "/shards";
  ASSERT_TRUE(testing_util::MakeSyntheticShards(shards, 64, 2, 16, 16).ok());
  std::vector<std::unique_ptr<testing_util::ServerProcess>> servers;
  for (int r = 0; r < 2; ++r) {
    const std::string logs = absl::StrCat(dir.path(), "/server", r);
    std::filesystem::create_directories(logs);
    servers.push_back(std::make_unique<testing_util::ServerProcess>(shards, logs));
    absl::Status started = servers.back()->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  const std::string master_port = absl::StrCat(testing_util::FreePort());
  ChildProcess ranks[2];
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks[r]
                    .Start({BinaryPath("client/shardcast-train"),
                            "--server",
                            servers[r]->address(),
                            "--job-id",
                            "stall",
                            "--rank",
                            absl::StrCat(r),
                            "--world-size",
                            "2",
                            "--master-port",
                            master_port,
                            "--rendezvous-timeout",
                            "5m",
                            "--stream-timeout",
                            "2s",
                            "--arch",
                            "small-cnn",
                            "--resize",
                            "16",
                            "--crop",
                            "16",
                            "-b",
                            "4",
                            "--epochs",
                            "100000",
                            "--threads",
                            "1",
                            "--device",
                            "cpu",
                            "--no-progress",
                            "--metrics",
                            dir.path() + "/m.{rank}.jsonl"},
                           absl::StrCat(dir.path(), "/out", r), absl::StrCat(dir.path(), "/err", r))
                    .ok());
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (CountLines(ReadWholeFile(dir.path() + "/m.1.jsonl"), "\"event\":\"step\"") < 2 &&
         std::chrono::steady_clock::now() < until) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(ranks[r].WaitFor(std::chrono::milliseconds(10)).has_value())
          << ReadWholeFile(absl::StrCat(dir.path(), "/err", r));
    }
  }
  ASSERT_EQ(::kill(servers[1]->pid(), SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  std::optional<int> status[2];
  for (int r : {1, 0}) status[r] = ranks[r].WaitFor(std::chrono::seconds(60));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  ::kill(servers[1]->pid(), SIGCONT);
  const std::string err1 = ReadWholeFile(dir.path() + "/err1");
  const std::string err0 = ReadWholeFile(dir.path() + "/err0");
  ASSERT_TRUE(status[1].has_value()) << "the stalled rank did not fail; stderr:\n" << err1;
  ASSERT_TRUE(status[0].has_value()) << "its peer did not fail; stderr:\n" << err0;
  EXPECT_LT(seconds, 60);
  EXPECT_TRUE(WIFEXITED(*status[1]) && WEXITSTATUS(*status[1]) == 1) << *status[1] << err1;
  for (const std::string& part :
       {std::string("shardcast-train: error: rank 1: epoch "),
        std::string("job 'stall' rank 1 epoch "),
        "no batch from server " + servers[1]->address() + " for 2 s (the stream timeout)"}) {
    EXPECT_NE(err1.find(part), std::string::npos) << part << "\n" << err1;
  }
  EXPECT_TRUE(WIFEXITED(*status[0]) && WEXITSTATUS(*status[0]) != 0) << *status[0] << err0;
  EXPECT_NE(err0.find("shardcast-train: error: rank 0: epoch "), std::string::npos) << err0;
  EXPECT_NE(err0.find("a peer rank has probably failed or exited"), std::string::npos) << err0;
}

TEST(TrainTorchScriptTest, ScriptedModelTrainsDataParallelAndSavesTorchScript) {
  TempDir dir;
  const std::string script = dir.path() + "/make.py";
  std::ofstream(script) << R"(import sys, torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 3)
    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean(dim=(2, 3)))
torch.manual_seed(0)
torch.jit.script(Net()).save(sys.argv[1])
)";
  const std::string model = dir.path() + "/net.pt";
  ASSERT_EQ(std::system(absl::StrCat(REFERENCE_PYTHON, " ", script, " ", model, " > ", dir.path(),
                                     "/py.out 2>&1")
                            .c_str()),
            0)
      << ReadWholeFile(dir.path() + "/py.out");
  const TrainerExit exit =
      RunTrainer({"--model", model, "--synthetic-batches", "3", "--num-classes", "3", "-b", "4",
                  "--crop", "16", "--nproc-per-node", "2", "-lr", "0.05", "--threads", "1",
                  "--no-progress", "--save", dir.path() + "/trained.{rank}.pt"},
                 dir.path() + "/out", dir.path() + "/err", std::chrono::minutes(3));
  ASSERT_TRUE(exit.started.ok()) << exit.started;
  ASSERT_TRUE(exit.wait_status.has_value());
  ASSERT_TRUE(exit.code() == 0) << ReadWholeFile(dir.path() + "/err");
  torch::jit::Module initial = torch::jit::load(model);
  torch::jit::Module rank0 = torch::jit::load(dir.path() + "/trained.0.pt");
  torch::jit::Module rank1 = torch::jit::load(dir.path() + "/trained.1.pt");
  std::map<std::string, torch::Tensor> p0, p1, p_init;
  for (const auto& p : rank0.named_parameters()) p0[p.name] = p.value;
  for (const auto& p : rank1.named_parameters()) p1[p.name] = p.value;
  for (const auto& p : initial.named_parameters()) p_init[p.name] = p.value;
  ASSERT_EQ(p0.size(), 6u);
  for (const auto& [name, t] : p0) {
    EXPECT_TRUE(torch::equal(t, p1[name])) << name << " differs between ranks";
    EXPECT_FALSE(torch::equal(t, p_init[name])) << name << " did not train";
  }
  // Still a working scripted model.
  torch::Tensor out = rank0.forward({torch::randn({2, 3, 16, 16})}).toTensor();
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3}));
}

}  // namespace
}  // namespace shardcast::train

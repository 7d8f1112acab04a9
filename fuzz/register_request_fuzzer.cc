// libFuzzer harness: Register validation (server/job_registry). The input is a
// serialized shardcast.v1.RegisterRequest, parsed as gRPC would; unparseable bytes are
// dropped. Each request takes the service's path: its dataset name is resolved by a
// real DatasetRegistry, then JobRegistry::Register (EffectiveJobConfig, Validate, the
// planner) runs in a fresh registry with the server's default job config and limits.
//
// The registry holds real datasets, indexed once at start-up by ServedDataset::Load:
//   default  10 synthetic JPEG samples (5 classes) in 4 shards of 3, 3, 3 and 1
//   val      5 JPEG samples in 2 shards, a shard file name and class texts in Latin-1,
//            so the escaping of wire strings is exercised
//   captioned 6 JPEG samples in 2 shards, every other one with a "txt" member, so a job
//            whose fields require it leaves samples out (RegisterResponse.left_out)
//   broken   a directory without shards: indexing failed (FAILED_PRECONDITION)
//   pending  never indexed (UNAVAILABLE)
//
// Invariants (abort on violation): an error is one the service documents for
// Register; an OK response has n >= 1 equal to the planner's answer over the samples
// the job's fields select (JobSamples::Select) and equal for every rank of the job,
// num_samples and left_out those of the selection (together the dataset's samples),
// image_shape {3, crop, crop} for a job with images and empty for a members-only one
// (image: false), a delivery that is never UNSPECIFIED, the effective config (exactly
// what EffectiveJobConfig gives) within the message limit, every string field valid UTF-8
// and, for split shard, disjoint shard lists over the ranks that cover the dataset; the
// same request registered again gives the same answer (same response or same code);
// another rank of the job is accepted with the same response but its shards; a rank with
// another world size or dataset is refused with FAILED_PRECONDITION.
//
// A request with `mix` (a mixture of the datasets above) takes the service's mixture path
// (ParseMixture, each name resolved, JobRegistry::RegisterMixture). Its OK response: split
// sample, samples_per_epoch the asked one or (0) the mixed datasets' selected samples
// together, batches_per_epoch S // (B*W) with drop and ceil(S / (B*W)) with pad (every
// rank the same count), mix_datasets the asked names in the mixture's order with their
// selections' counts, each point of `mix` naming every dataset once with weights that
// are >= 0 and sum to 1, the effective config otherwise; registered again, by another
// rank, or with another epoch length (FAILED_PRECONDITION: ranks agree on the mixture) as
// for one dataset. A mixture with split shard is never accepted.
//
// The seed corpus is written by
//   SHARDCAST_FUZZ_WRITE_SEEDS=fuzz/corpus/register_request_fuzzer \
//     build-fuzz/fuzz/register_request_fuzzer -runs=0 /tmp/empty_dir
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/plan/job_config.h"
#include "common/plan/job_samples.h"
#include "common/util/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/job_config_proto.h"
#include "server/assembly/served_dataset.h"
#include "server/serving/dataset_registry.h"
#include "server/serving/job_mixture.h"
#include "server/serving/job_registry.h"
#include "server/serving/server_options.h"
#include "shardcast/v1/shardcast.pb.h"
#include "tests/support/synthetic_shards.h"
#include "tests/support/temp_dir.h"
#include "tools/pack/image_encode.h"
#include "tools/pack/tar_writer.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = ::shardcast::v1;
using ::google::protobuf::util::MessageDifferencer;
using ::shardcast::JobConfig;
using ::shardcast::JobLimits;
using ::shardcast::server::DatasetRegistry;
using ::shardcast::server::JobRegistry;
using ::shardcast::server::NamedDataset;
using ::shardcast::server::ServerOptions;

// Every registration of the harness comes from one client (PeerHost's form).
constexpr char kPeer[] = "ipv4:127.0.0.1";

// Ranks of a job registered besides the request's own: all of them up to this world
// size, the first and last half of this many above it (a world of 65536 ranks would
// make one input take seconds).
constexpr int32_t kMaxRanksChecked = 64;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "register_request_fuzzer: %s\n", what.c_str());
  std::abort();
}

void Check(bool ok, const std::string& what) {
  if (!ok) Fail(what);
}

// The ServedDataset the server's LoadDataset would publish for `dir` (no index cache).
absl::StatusOr<std::unique_ptr<NamedDataset>> LoadNamed(const std::string& dir,
                                                        const ServerOptions& options) {
  shardcast::IndexOptions index_options;
  index_options.label_field = options.label_field;
  index_options.max_classes = options.max_classes;
  absl::StatusOr<std::unique_ptr<shardcast::server::ServedDataset>> data =
      shardcast::server::ServedDataset::Load(dir, index_options,
                                             static_cast<size_t>(options.gzip_index_memory_bytes));
  if (!data.ok()) return data.status();
  auto named = std::make_unique<NamedDataset>();
  named->data = *std::move(data);
  named->dir = named->data->index().root;
  // An assembler without a decode pool or stats: registration never assembles a batch,
  // but a mixed job's is derived from its first dataset's (BatchAssembler::ForMixture),
  // so a dataset without one would crash the mixture path, not test it.
  named->assembler = std::make_unique<shardcast::server::BatchAssembler>(
      named->data.get(), /*pool=*/nullptr, /*stats=*/nullptr);
  return named;
}

// "val": real JPEGs whose class texts and one shard file name are Latin-1 bytes (the
// pack library's writer takes ASCII member names only; the file is renamed after).
void WriteLatin1Dataset(const std::string& dir) {
  fs::create_directories(dir);
  shardcast::pack::ShardWriter writer({dir, /*per_shard=*/3, /*max_shard_bytes=*/0});
  for (int i = 0; i < 5; ++i) {
    std::vector<uint8_t> rgb(24 * 24 * 3, static_cast<uint8_t>(40 * i));
    absl::StatusOr<std::string> jpeg = shardcast::pack::EncodeJpeg(rgb.data(), 24, 24);
    Check(jpeg.ok(), "cannot encode the val dataset's JPEG");
    const int label = i % 2;
    const std::string json = absl::StrCat("{\"label\": ", label, ", \"class\": \"",
                                          label == 0 ? "caf\xe9" : "na\xefve", "\"}");
    Check(writer.AddSample(absl::StrCat("v", i), {{"jpg", *jpeg}, {"json", json}}).ok(),
          "cannot write the val dataset");
  }
  Check(writer.Close().ok(), "cannot close the val dataset's shards");
  fs::rename(writer.shard_paths()[0], dir + "/caf\xe9-000000.tar");
}

struct Fixture {
  shardcast::testing_util::TempDir dir{"register_request_fuzzer"};
  ServerOptions options;  // the server's defaults: job config, limits, max jobs, TTL
  JobLimits limits;
  std::unique_ptr<DatasetRegistry> datasets;
  const NamedDataset* default_data = nullptr;
  const NamedDataset* val_data = nullptr;
};

// "captioned": real JPEGs, every other sample with a caption ("txt"), all with a "cls".
void WriteCaptionedDataset(const std::string& dir) {
  fs::create_directories(dir);
  shardcast::pack::ShardWriter writer({dir, /*per_shard=*/3, /*max_shard_bytes=*/0});
  for (int i = 0; i < 6; ++i) {
    std::vector<uint8_t> rgb(24 * 24 * 3, static_cast<uint8_t>(30 * i));
    absl::StatusOr<std::string> jpeg = shardcast::pack::EncodeJpeg(rgb.data(), 24, 24);
    Check(jpeg.ok(), "cannot encode the captioned dataset's JPEG");
    std::vector<std::pair<std::string, std::string>> members = {{"jpg", *jpeg},
                                                                {"cls", absl::StrCat(i % 3)}};
    if (i % 2 == 0) members.emplace_back("txt", absl::StrCat("a caption of sample ", i));
    Check(writer.AddSample(absl::StrCat("c", i), members).ok(),
          "cannot write the captioned dataset");
  }
  Check(writer.Close().ok(), "cannot close the captioned dataset's shards");
}

// A request in the corpus: its file name says what it tries.
void WriteSeed(const std::string& dir, const std::string& name,
               const v1::RegisterRequest& request) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out << request.SerializeAsString();
}

v1::RegisterRequest Request(const std::string& job, int32_t rank, int32_t world, int32_t batch,
                            v1::Split split, v1::Remainder remainder, v1::TransformMode mode) {
  v1::RegisterRequest r;
  r.set_job_id(job);
  r.set_rank(rank);
  r.set_world_size(world);
  r.set_batch_size(batch);
  r.set_split(split);
  r.set_remainder(remainder);
  r.mutable_transform()->set_mode(mode);
  r.mutable_transform()->set_resize(40);
  r.mutable_transform()->set_crop(32);
  return r;
}

void AddMixPoint(v1::RegisterRequest* r, int64_t step,
                 const std::vector<std::pair<std::string, double>>& weights) {
  v1::MixPoint* point = r->add_mix();
  point->set_step(step);
  for (const auto& [name, weight] : weights) {
    v1::MixWeight* w = point->add_weights();
    w->set_dataset(name);
    w->set_weight(weight);
  }
}

void WriteSeeds(const std::string& dir) {
  fs::create_directories(dir);
  using v1::REMAINDER_DROP, v1::REMAINDER_PAD, v1::SPLIT_SAMPLE, v1::SPLIT_SHARD,
      v1::TRANSFORM_MODE_CENTER, v1::TRANSFORM_MODE_RANDOM;
  // Accepted.
  WriteSeed(dir, "ok_sample_drop_center_w1",
            Request("a", 0, 1, 4, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  v1::RegisterRequest r = Request("b", 2, 3, 2, SPLIT_SAMPLE, REMAINDER_PAD, TRANSFORM_MODE_RANDOM);
  r.set_seed(9);
  r.set_block_size(1);
  WriteSeed(dir, "ok_sample_pad_random_w3", r);
  WriteSeed(dir, "ok_sample_pad_w8",
            Request("c", 7, 8, 1, SPLIT_SAMPLE, REMAINDER_PAD, TRANSFORM_MODE_CENTER));
  r = Request("d", 1, 2, 1, SPLIT_SHARD, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_workers(2);
  r.set_shuffle_shards(true);
  r.set_shuffle_buffer(4);
  r.set_seed(5);
  WriteSeed(dir, "ok_shard_drop_w2_shuffled", r);
  r = Request("e", 0, 3, 1, SPLIT_SHARD, REMAINDER_DROP, TRANSFORM_MODE_RANDOM);
  r.set_dataset("default");
  WriteSeed(dir, "ok_shard_random_w3_named_default", r);
  r = Request("f", 1, 2, 1, SPLIT_SHARD, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_dataset("val");
  WriteSeed(dir, "ok_shard_w2_latin1_val", r);
  r = Request("g", 0, 1, 2, SPLIT_SAMPLE, REMAINDER_PAD, TRANSFORM_MODE_CENTER);
  r.mutable_transform()->clear_resize();  // the default resize (256) with crop 32
  WriteSeed(dir, "ok_default_resize", r);
  // Round 4's jobs: members, members only, encoded delivery. The first is the input
  // that aborted the harness before its image_shape invariant knew members-only jobs.
  r = Request("i", 0, 1, 2, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_image(false);
  r.add_fields("cls");
  WriteSeed(dir, "ok_members_only_cls", r);
  r = Request("j", 1, 2, 1, SPLIT_SAMPLE, REMAINDER_PAD, TRANSFORM_MODE_RANDOM);
  r.set_dataset("captioned");
  r.add_fields("txt");
  r.add_fields("cls");
  WriteSeed(dir, "ok_captioned_txt_leaves_samples_out", r);
  r = Request("k", 0, 2, 1, SPLIT_SHARD, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_dataset("captioned");
  r.set_image(false);
  r.add_fields("txt?");
  WriteSeed(dir, "ok_captioned_optional_txt_members_only_shard", r);
  r = Request("l", 0, 1, 2, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_RANDOM);
  r.set_delivery(v1::IMAGE_DELIVERY_ENCODED);
  r.add_fields("json");
  WriteSeed(dir, "ok_encoded_delivery_json", r);
  // Refused.
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_image(false);
  WriteSeed(dir, "bad_members_only_without_fields", r);
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.add_fields("txt");
  WriteSeed(dir, "bad_field_the_dataset_lacks", r);
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_delivery(static_cast<v1::ImageDelivery>(9));
  WriteSeed(dir, "bad_unknown_delivery", r);
  WriteSeed(dir, "bad_rank_ge_world",
            Request("h", 2, 2, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  WriteSeed(dir, "bad_negative_rank",
            Request("h", -1, 2, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  WriteSeed(dir, "bad_negative_batch",
            Request("h", 0, 1, -3, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.set_shuffle_buffer(-1);
  r.set_block_size(-2);
  WriteSeed(dir, "bad_negative_shuffle_buffer", r);
  WriteSeed(dir, "bad_zero_world",
            Request("h", 0, 0, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  WriteSeed(
      dir, "bad_unknown_split",
      Request("h", 0, 1, 1, static_cast<v1::Split>(7), REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  WriteSeed(
      dir, "bad_unknown_transform_mode",
      Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, static_cast<v1::TransformMode>(99)));
  r = Request("h", 0, 1, 65536, SPLIT_SAMPLE, REMAINDER_PAD, TRANSFORM_MODE_CENTER);
  r.mutable_transform()->set_resize(4096);
  r.mutable_transform()->set_crop(4096);
  WriteSeed(dir, "bad_huge_batch_message", r);
  WriteSeed(dir, "bad_batch_over_limit",
            Request("h", 0, 1, 1 << 20, SPLIT_SAMPLE, REMAINDER_PAD, TRANSFORM_MODE_CENTER));
  WriteSeed(dir, "bad_empty_job_id",
            Request("", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  WriteSeed(
      dir, "bad_long_job_id",
      Request(std::string(300, 'j'), 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  for (const char* name : {"test", "broken", "pending"}) {
    r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
    r.set_dataset(name);
    WriteSeed(dir, absl::StrCat("bad_dataset_", name), r);
  }
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  r.mutable_transform()->set_resize(16);  // center crop 32 from a short side of 16
  WriteSeed(dir, "bad_resize_below_crop", r);
  WriteSeed(dir, "bad_shard_fewer_shards_than_ranks",
            Request("h", 0, 5, 1, SPLIT_SHARD, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  WriteSeed(dir, "bad_shard_pad",
            Request("h", 0, 1, 1, SPLIT_SHARD, REMAINDER_PAD, TRANSFORM_MODE_CENTER));
  WriteSeed(dir, "bad_no_full_batch",
            Request("h", 0, 2, 8, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER));
  // Mixtures (issue 47): constant weights over two datasets, a schedule over three with an
  // epoch length, and their refusals.
  r = Request("m", 1, 2, 2, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", 0.7}, {"val", 0.3}});
  WriteSeed(dir, "ok_mix_constant_default_val", r);
  r = Request("n", 0, 3, 2, v1::SPLIT_UNSPECIFIED, REMAINDER_PAD, TRANSFORM_MODE_RANDOM);
  AddMixPoint(&r, 0, {{"default", 1}, {"val", 0}, {"captioned", 0}});
  AddMixPoint(&r, 4, {{"default", 0.2}, {"val", 0.5}, {"captioned", 0.3}});
  r.set_samples_per_epoch(25);
  r.set_seed(11);
  WriteSeed(dir, "ok_mix_schedule_three_pad_spe25", r);
  r = Request("o", 0, 2, 4, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", 1}, {"captioned", 1}});
  r.set_samples_per_epoch(uint64_t{1} << 40);  // long epochs are fine: nothing is walked
  WriteSeed(dir, "ok_mix_long_epoch", r);
  r = Request("h", 0, 1, 1, SPLIT_SHARD, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", 1}, {"val", 1}});
  WriteSeed(dir, "bad_mix_split_shard", r);
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", 1}, {"val", 1}});
  r.set_dataset("default");
  WriteSeed(dir, "bad_mix_beside_dataset", r);
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", -1}, {"val", 1}});
  WriteSeed(dir, "bad_mix_negative_weight", r);
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", 1}, {"broken", 1}});
  WriteSeed(dir, "bad_mix_broken_dataset", r);
  r = Request("h", 0, 1, 1, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 5, {{"default", 1}, {"val", 1}});
  AddMixPoint(&r, 2, {{"default", 1}, {"val", 1}});
  WriteSeed(dir, "bad_mix_steps_not_increasing", r);
  r = Request("h", 0, 2, 4, SPLIT_SAMPLE, REMAINDER_DROP, TRANSFORM_MODE_CENTER);
  AddMixPoint(&r, 0, {{"default", 1}, {"val", 1}});
  r.set_samples_per_epoch(7);  // no full step of 8
  WriteSeed(dir, "bad_mix_epoch_below_a_step", r);
  WriteSeed(dir, "bad_server_defaults_only",  // batch 32 of 10 samples
            Request("h", 0, 1, 0, v1::SPLIT_UNSPECIFIED, v1::REMAINDER_UNSPECIFIED,
                    v1::TRANSFORM_MODE_UNSPECIFIED));
}

const Fixture& GetFixture() {
  // An object, not a leaked pointer: its destructor at exit removes the temp dir.
  static Fixture fixture;
  static const bool ready = [] {
    // Protobuf logs every string field that is not UTF-8 before the parse fails: a line
    // for a third of the mutated inputs, which would drown libFuzzer's own output.
    google::protobuf::SetLogHandler(nullptr);
    Fixture* f = &fixture;
    f->limits.max_message_bytes = f->options.max_message_bytes;  // as server/main.cc
    const std::string root = f->dir.path();
    absl::Status made = shardcast::testing_util::MakeSyntheticShards(
        root + "/default", /*num_samples=*/10, /*num_classes=*/5, /*size=*/32, /*per_shard=*/3);
    Check(made.ok(), "cannot write the default dataset: " + made.ToString());
    WriteLatin1Dataset(root + "/val");
    WriteCaptionedDataset(root + "/captioned");
    fs::create_directories(root + "/broken");
    f->datasets = std::make_unique<DatasetRegistry>(
        std::vector<shardcast::server::DatasetSpec>{{"default", root + "/default"},
                                                    {"val", root + "/val"},
                                                    {"captioned", root + "/captioned"},
                                                    {"broken", root + "/broken"},
                                                    {"pending", root + "/pending"}});
    for (const std::string name : {"default", "val", "captioned"}) {
      absl::StatusOr<std::unique_ptr<NamedDataset>> named =
          LoadNamed(absl::StrCat(root, "/", name), f->options);
      Check(named.ok(), absl::StrCat("cannot index ", name, ": ", named.status().ToString()));
      const NamedDataset* published = f->datasets->Publish(name, *std::move(named));
      if (name == "default") f->default_data = published;
      if (name == "val") f->val_data = published;
    }
    Check(f->val_data->data->index().shards.size() == 2 &&
              f->val_data->data->index().class_names.size() == 2,
          "the val dataset was not indexed as written");
    absl::StatusOr<std::unique_ptr<NamedDataset>> broken = LoadNamed(root + "/broken", f->options);
    Check(!broken.ok(), "a directory without shards was indexed");
    f->datasets->Fail("broken", broken.status());
    if (const char* seeds = std::getenv("SHARDCAST_FUZZ_WRITE_SEEDS"); seeds != nullptr) {
      WriteSeeds(seeds);
    }
    return true;
  }();
  (void)ready;
  return fixture;
}

// The codes Register may answer (docs/server.md, "Datasets" and "Jobs").
void CheckRefusal(const absl::Status& status, const std::string& where) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
      if (status.message().empty()) Fail(where + ": an error without a message");
      return;
    default:
      Fail(absl::StrCat(where, ": an undocumented code: ", status.ToString()));
  }
}

// Every string field of `message`, nested messages included, is valid UTF-8.
void CheckStringsAreUtf8(const google::protobuf::Message& message) {
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const google::protobuf::Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    const bool repeated = field->is_repeated();
    const int count = repeated ? reflection->FieldSize(message, field) : 1;
    for (int j = 0; j < count; ++j) {
      if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
        const std::string value = repeated ? reflection->GetRepeatedString(message, field, j)
                                           : reflection->GetString(message, field);
        Check(shardcast::IsValidUtf8(value),
              absl::StrCat("response field ", field->name(), " is not valid UTF-8"));
      } else if (field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
                 (repeated || reflection->HasField(message, field))) {
        CheckStringsAreUtf8(repeated ? reflection->GetRepeatedMessage(message, field, j)
                                     : reflection->GetMessage(message, field));
      }
    }
  }
}

void CheckResponse(const Fixture& f, const v1::RegisterRequest& request,
                   const NamedDataset& dataset, const v1::RegisterResponse& response) {
  absl::StatusOr<JobConfig> effective =
      shardcast::EffectiveJobConfig(request, f.options.defaults, f.limits);
  Check(effective.ok(),
        "accepted a request whose EffectiveJobConfig fails: " + effective.status().ToString());
  absl::StatusOr<JobConfig> answered = shardcast::ResponseConfig(response);
  Check(answered.ok(), "the response's config does not read back: " + answered.status().ToString());
  if (auto diff = shardcast::FirstDifference(*answered, *effective); diff.has_value()) {
    Fail(absl::StrCat("the response's ", diff->field, " is ", diff->a, ", the effective config's ",
                      diff->b));
  }
  Check(shardcast::BatchMessageBytes(*effective) <= f.limits.max_message_bytes,
        "accepted a job whose batch message exceeds the limit");
  // The job plans over the samples its fields select, not over the whole dataset.
  const shardcast::DatasetIndex& index = dataset.data->index();
  absl::StatusOr<std::shared_ptr<const shardcast::JobSamples>> samples =
      shardcast::JobSamples::Select(index, *effective, f.options.max_member_bytes);
  Check(samples.ok(),
        "accepted a job whose sample selection fails: " + samples.status().ToString());
  absl::StatusOr<int64_t> n = shardcast::BatchesPerRank((*samples)->shard_sizes(), effective->plan);
  Check(n.ok() && *n >= 1 && response.batches_per_epoch() == *n,
        absl::StrCat("batches_per_epoch ", response.batches_per_epoch(), ", the planner says ",
                     n.ok() ? absl::StrCat(*n) : n.status().ToString()));
  if (effective->image) {
    const int64_t crop = effective->transform.crop;
    Check(response.image_shape_size() == 3 && response.image_shape(0) == 3 &&
              response.image_shape(1) == crop && response.image_shape(2) == crop,
          "image_shape is not {3, crop, crop} for a job with images");
  } else {
    Check(response.image_shape_size() == 0, "image_shape is not empty for a members-only job");
    Check(!effective->fields.empty(), "accepted a job with neither an image nor fields");
  }
  Check(response.delivery() != v1::IMAGE_DELIVERY_UNSPECIFIED, "the response's delivery is unset");
  Check(response.num_samples() == (*samples)->num_samples(),
        "num_samples differs from the job's selected samples");
  int64_t left_out = 0;
  Check(response.left_out_size() == static_cast<int>((*samples)->left_out().size()),
        "left_out lists other reasons than the selection's");
  for (int i = 0; i < response.left_out_size(); ++i) {
    Check(response.left_out(i).count() == (*samples)->left_out()[i].count &&
              response.left_out(i).count() > 0,
          "a left_out count differs from the selection's");
    left_out += response.left_out(i).count();
  }
  Check(response.num_samples() + left_out == index.num_samples,
        "num_samples and left_out do not add up to the dataset's samples");
  Check(response.num_classes() == index.num_classes, "num_classes differs from the index");
  Check(response.dataset() == dataset.name, "the response names another dataset");
  Check((effective->plan.split == shardcast::Split::kShard) == (response.shards_size() > 0),
        "shards listed for split sample, or none for split shard");
  CheckStringsAreUtf8(response);
}

bool SameOutcome(const absl::StatusOr<v1::RegisterResponse>& a,
                 const absl::StatusOr<v1::RegisterResponse>& b) {
  if (a.ok() != b.ok()) return false;
  if (!a.ok()) return a.status().code() == b.status().code();
  return MessageDifferencer::Equals(*a, *b);
}

// The ranks to register besides `own`.
std::vector<int32_t> OtherRanks(int32_t world, int32_t own) {
  std::vector<int32_t> ranks;
  for (int32_t r = 0; r < world; ++r) {
    if (world > kMaxRanksChecked && r == kMaxRanksChecked / 2) r = world - kMaxRanksChecked / 2;
    if (r != own) ranks.push_back(r);
  }
  return ranks;
}

// A mixed job's OK response (the header's invariants).
void CheckMixedResponse(const Fixture& f, const v1::RegisterRequest& request,
                        const shardcast::server::MixtureRequest& mixture,
                        const std::vector<const NamedDataset*>& datasets,
                        const v1::RegisterResponse& response) {
  absl::StatusOr<JobConfig> effective =
      shardcast::EffectiveJobConfig(request, f.options.defaults, f.limits);
  Check(effective.ok(),
        "accepted a mixture whose EffectiveJobConfig fails: " + effective.status().ToString());
  if (request.split() == v1::SPLIT_UNSPECIFIED) effective->plan.split = shardcast::Split::kSample;
  Check(effective->plan.split == shardcast::Split::kSample, "accepted a mixture with split shard");
  absl::StatusOr<JobConfig> answered = shardcast::ResponseConfig(response);
  Check(answered.ok(), "the response's config does not read back: " + answered.status().ToString());
  if (auto diff = shardcast::FirstDifference(*answered, *effective); diff.has_value()) {
    Fail(absl::StrCat("mixture: the response's ", diff->field, " is ", diff->a,
                      ", the effective config's ", diff->b));
  }
  Check(response.mix_datasets_size() == static_cast<int>(datasets.size()),
        "mix_datasets does not list the mixture's datasets");
  uint64_t selected = 0;
  for (size_t d = 0; d < datasets.size(); ++d) {
    absl::StatusOr<std::shared_ptr<const shardcast::JobSamples>> samples =
        shardcast::JobSamples::Select(datasets[d]->data->index(), *effective,
                                      f.options.max_member_bytes);
    Check(samples.ok(), "accepted a mixture whose selection of '" + datasets[d]->name +
                            "' fails: " + samples.status().ToString());
    const v1::MixDataset& listed = response.mix_datasets(static_cast<int>(d));
    Check(listed.name() == mixture.names[d] && listed.num_samples() == (*samples)->num_samples(),
          absl::StrCat("mix_datasets(", d, ") is ", listed.name(), " of ", listed.num_samples(),
                       " samples, the mixture's ", mixture.names[d], " of ",
                       (*samples)->num_samples()));
    selected += static_cast<uint64_t>((*samples)->num_samples());
  }
  const uint64_t spe = request.samples_per_epoch() == 0 ? selected : request.samples_per_epoch();
  Check(response.samples_per_epoch() == spe,
        absl::StrCat("samples_per_epoch ", response.samples_per_epoch(), ", asked ",
                     request.samples_per_epoch(), " over ", selected, " samples"));
  // The epoch's batches per rank follow from its length alone, as split sample's do from
  // the dataset's size (mixture_epoch.h).
  const uint64_t step = static_cast<uint64_t>(effective->plan.batch_size) *
                        static_cast<uint64_t>(effective->plan.world_size);
  const uint64_t n = effective->plan.remainder == shardcast::Remainder::kDrop
                         ? spe / step
                         : (spe + step - 1) / step;
  Check(n >= 1 && static_cast<uint64_t>(response.batches_per_epoch()) == n,
        absl::StrCat("batches_per_epoch ", response.batches_per_epoch(), ", ", spe,
                     " samples in steps of ", step, " make ", n));
  Check(response.mix_size() >= 1, "a mixed job's response has no schedule");
  int64_t last_step = -1;
  for (const v1::MixPoint& point : response.mix()) {
    Check(point.step() > last_step, "the response's schedule is not in step order");
    last_step = point.step();
    Check(point.weights_size() == static_cast<int>(datasets.size()),
          "a point of the response's schedule does not weigh every dataset");
    double sum = 0;
    std::set<std::string> names;
    for (const v1::MixWeight& w : point.weights()) {
      Check(w.weight() >= 0 && w.weight() <= 1, "a normalised weight outside [0, 1]");
      sum += w.weight();
      names.insert(w.dataset());
    }
    Check(names == std::set<std::string>(mixture.names.begin(), mixture.names.end()),
          "a point of the response's schedule names other datasets than the mixture");
    Check(sum > 1 - 1e-9 && sum < 1 + 1e-9, absl::StrCat("a point's weights sum to ", sum));
  }
  Check(response.num_samples() == static_cast<int64_t>(spe),
        "a mixed job's num_samples is not its epoch length");
  if (effective->image) {
    const int64_t crop = effective->transform.crop;
    Check(response.image_shape_size() == 3 && response.image_shape(1) == crop,
          "image_shape is not {3, crop, crop} for a mixture with images");
  }
  CheckStringsAreUtf8(response);
}

// The mixture path of ServiceCore::Register (RegisterMixture).
int TestMixture(const Fixture& f, const v1::RegisterRequest& request,
                JobRegistry::Options registry) {
  absl::StatusOr<shardcast::server::MixtureRequest> mixture =
      shardcast::server::ParseMixture(request);
  if (!mixture.ok()) {
    Check(
        mixture.status().code() == absl::StatusCode::kInvalidArgument,
        "ParseMixture answered another code than INVALID_ARGUMENT: " + mixture.status().ToString());
    CheckRefusal(mixture.status(), "ParseMixture");
    return 0;
  }
  std::vector<const NamedDataset*> datasets;
  for (const std::string& name : mixture->names) {
    absl::StatusOr<const NamedDataset*> dataset = f.datasets->Resolve(name);
    if (!dataset.ok()) {
      CheckRefusal(dataset.status(), "Resolve (mix)");
      return 0;
    }
    datasets.push_back(*dataset);
  }
  JobRegistry jobs(registry);
  const absl::StatusOr<v1::RegisterResponse> first =
      jobs.RegisterMixture(request, *mixture, datasets, kPeer);
  const absl::StatusOr<v1::RegisterResponse> again =
      jobs.RegisterMixture(request, *mixture, datasets, kPeer);
  Check(SameOutcome(first, again),
        absl::StrCat("a mixture registered twice, answered ", first.status().ToString(), " then ",
                     again.status().ToString(), " (or two different responses)"));
  if (!first.ok()) {
    CheckRefusal(first.status(), "RegisterMixture");
    Check(jobs.size() == 0, "a refused mixture left a job behind");
    return 0;
  }
  CheckMixedResponse(f, request, *mixture, datasets, *first);
  for (int32_t rank : OtherRanks(request.world_size(), request.rank())) {
    v1::RegisterRequest peer = request;
    peer.set_rank(rank);
    absl::StatusOr<v1::RegisterResponse> answer =
        jobs.RegisterMixture(peer, *mixture, datasets, kPeer);
    Check(answer.ok() && MessageDifferencer::Equals(*first, *answer),
          absl::StrCat("rank ", rank, " of a mixed job was refused or answered otherwise: ",
                       answer.status().ToString()));
  }
  // Ranks agree on the mixture: another epoch length is another mixture.
  v1::RegisterRequest longer = request;
  longer.set_samples_per_epoch(first->samples_per_epoch() + 1);
  absl::StatusOr<shardcast::server::MixtureRequest> other = shardcast::server::ParseMixture(longer);
  Check(other.ok(), "a mixture with another epoch length does not parse");
  absl::StatusOr<v1::RegisterResponse> answer =
      jobs.RegisterMixture(longer, *other, datasets, kPeer);
  Check(answer.status().code() == absl::StatusCode::kFailedPrecondition,
        "a rank of a mixed job with another epoch length was not refused: " +
            answer.status().ToString());
  Check(jobs.size() == 1, "the ranks of one mixed job made several jobs");
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = GetFixture();
  v1::RegisterRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;

  JobRegistry::Options registry;
  registry.defaults = f.options.defaults;
  registry.limits = f.limits;
  registry.job_ttl = f.options.job_ttl;
  registry.max_jobs = f.options.max_jobs;
  if (request.mix_size() > 0) return TestMixture(f, request, registry);

  // As ServiceCore::Register: resolve the dataset, then register.
  absl::StatusOr<const NamedDataset*> dataset = f.datasets->Resolve(request.dataset());
  if (!dataset.ok()) {
    CheckRefusal(dataset.status(), "Resolve");
    return 0;
  }
  JobRegistry jobs(registry);
  const absl::StatusOr<v1::RegisterResponse> first = jobs.Register(request, *dataset, kPeer);
  const absl::StatusOr<v1::RegisterResponse> again = jobs.Register(request, *dataset, kPeer);
  Check(SameOutcome(first, again),
        absl::StrCat("registered twice, answered ", first.status().ToString(), " then ",
                     again.status().ToString(), " (or two different responses)"));
  if (!first.ok()) {
    CheckRefusal(first.status(), "Register");
    Check(jobs.size() == 0, "a refused registration left a job behind");
    return 0;
  }
  CheckResponse(f, request, **dataset, *first);

  // Every rank of the job is accepted with the same answer but its own shards, and in
  // split shard the ranks' shards are disjoint (and cover the dataset when all ranks are
  // registered).
  const int32_t world = request.world_size();
  std::set<std::string> shards(first->shards().begin(), first->shards().end());
  size_t listed = shards.size();
  v1::RegisterResponse common = *first;
  common.clear_shards();
  for (int32_t rank : OtherRanks(world, request.rank())) {
    v1::RegisterRequest peer = request;
    peer.set_rank(rank);
    absl::StatusOr<v1::RegisterResponse> answer = jobs.Register(peer, *dataset, kPeer);
    Check(answer.ok(), absl::StrCat("rank ", request.rank(), " was accepted, rank ", rank,
                                    " of the same job refused: ", answer.status().ToString()));
    shards.insert(answer->shards().begin(), answer->shards().end());
    listed += answer->shards_size();
    answer->clear_shards();
    Check(MessageDifferencer::Equals(common, *answer),
          absl::StrCat("rank ", rank, " got another response than rank ", request.rank()));
  }
  Check(shards.size() == listed, "a shard is listed for two ranks");
  const shardcast::DatasetIndex& index = (*dataset)->data->index();
  if (first->shards_size() > 0 && world <= kMaxRanksChecked) {
    Check(shards.size() == index.shards.size(), "the ranks' shards do not cover the dataset");
    for (const shardcast::ShardInfo& shard : index.shards) {
      Check(shards.count(shardcast::EscapeToUtf8(shard.path)) == 1,
            "a shard of the dataset is listed for no rank");
    }
  }

  // Ranks of a job agree on the world size and the dataset.
  if (world < shardcast::kMaxWorldSize) {
    v1::RegisterRequest other_world = request;
    other_world.set_world_size(world + 1);
    absl::StatusOr<v1::RegisterResponse> answer = jobs.Register(other_world, *dataset, kPeer);
    Check(answer.status().code() == absl::StatusCode::kFailedPrecondition,
          "a rank with another world size was not refused: " + answer.status().ToString());
  }
  const NamedDataset* other_data = *dataset == f.default_data ? f.val_data : f.default_data;
  absl::StatusOr<v1::RegisterResponse> answer = jobs.Register(request, other_data, kPeer);
  Check(answer.status().code() == absl::StatusCode::kFailedPrecondition,
        "a rank of the job on another dataset was not refused: " + answer.status().ToString());
  Check(jobs.size() == 1, "the ranks of one job made several jobs");
  return 0;
}

// Checkpoint save/load (torch::serialize archives) and checkpoint-directory upkeep.
#include "client/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast::train {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFormatVersion = 1;

// A schedule as flat lists under `prefix`: each point's step and weight count, then
// every weight's dataset and value in order.
void WritePoints(const std::vector<MixturePoint>& schedule, const std::string& prefix,
                 torch::serialize::OutputArchive& archive) {
  std::vector<int64_t> steps, counts;
  std::vector<std::string> names;
  std::vector<double> weights;
  for (const MixturePoint& point : schedule) {
    steps.push_back(point.step);
    counts.push_back(static_cast<int64_t>(point.weights.size()));
    for (const auto& [name, weight] : point.weights) {
      names.push_back(name);
      weights.push_back(weight);
    }
  }
  archive.write(prefix + "_steps", c10::IValue(steps));
  archive.write(prefix + "_counts", c10::IValue(counts));
  archive.write(prefix + "_datasets", c10::IValue(c10::List<std::string>(names)));
  archive.write(prefix + "_weights", c10::IValue(weights));
}

// The inverse of WritePoints. Throws on entries of the wrong type.
absl::StatusOr<std::vector<MixturePoint>> ReadPoints(const std::string& prefix,
                                                     torch::serialize::InputArchive& archive) {
  c10::IValue v;
  archive.read(prefix + "_steps", v);
  const std::vector<int64_t> steps = v.toIntVector();
  archive.read(prefix + "_counts", v);
  const std::vector<int64_t> counts = v.toIntVector();
  archive.read(prefix + "_datasets", v);
  std::vector<std::string> names;
  for (const c10::IValue& name : v.toListRef()) names.push_back(name.toStringRef());
  archive.read(prefix + "_weights", v);
  const std::vector<double> weights = v.toDoubleVector();
  if (steps.size() != counts.size() || names.size() != weights.size()) {
    return absl::DataLossError(absl::StrCat(prefix, "_*: lists of inconsistent lengths"));
  }
  std::vector<MixturePoint> schedule;
  size_t next = 0;
  for (size_t p = 0; p < steps.size(); ++p) {
    MixturePoint point{steps[p], {}};
    for (int64_t k = 0; k < counts[p]; ++k, ++next) {
      if (next >= names.size()) return absl::DataLossError(prefix + "_*: too few weights");
      point.weights.emplace_back(names[next], weights[next]);
    }
    schedule.push_back(std::move(point));
  }
  return schedule;
}

// A mixed run's facts as flat lists: segments three numbers each; the schedule
// (WritePoints); each segment's schedule as its point count and all their points.
void WriteMixRun(const client::MixRun& mix, torch::serialize::OutputArchive& archive) {
  std::vector<int64_t> segments, segment_points;
  for (const MixtureSegment& s : mix.segments) {
    segments.insert(segments.end(), {s.start_position, s.start_step, s.global_batch});
  }
  std::vector<MixturePoint> all_points;
  for (const std::vector<MixturePoint>& schedule : mix.segment_schedules) {
    segment_points.push_back(static_cast<int64_t>(schedule.size()));
    all_points.insert(all_points.end(), schedule.begin(), schedule.end());
  }
  archive.write("meta.mix_segments", c10::IValue(segments));
  WritePoints(mix.schedule, "meta.mix_schedule", archive);
  archive.write("meta.mix_segment_schedule_points", c10::IValue(segment_points));
  WritePoints(all_points, "meta.mix_segment_schedule", archive);
  archive.write("meta.mix_data_fingerprint", c10::IValue(mix.data_fingerprint));
  archive.write("meta.mix_samples_per_epoch", c10::IValue(mix.samples_per_epoch));
}

// Each segment's schedule; none in checkpoints from before they were kept.
absl::StatusOr<std::vector<std::vector<MixturePoint>>> ReadSegmentSchedules(
    torch::serialize::InputArchive& archive) {
  std::vector<std::vector<MixturePoint>> out;
  c10::IValue v;
  if (!archive.try_read("meta.mix_segment_schedule_points", v)) return out;
  const std::vector<int64_t> counts = v.toIntVector();
  absl::StatusOr<std::vector<MixturePoint>> points =
      ReadPoints("meta.mix_segment_schedule", archive);
  if (!points.ok()) return points.status();
  size_t next = 0;
  for (int64_t n : counts) {
    if (n < 0 || points->size() - next < static_cast<size_t>(n)) {
      return absl::DataLossError("meta.mix_segment_schedule_*: too few points");
    }
    out.emplace_back(points->begin() + next, points->begin() + next + n);
    next += static_cast<size_t>(n);
  }
  return out;
}

// The inverse of WriteMixRun; absent (a checkpoint of no mixture, or from before these
// were kept): no segments. Throws on entries of the wrong type.
absl::StatusOr<client::MixRun> ReadMixRun(torch::serialize::InputArchive& archive) {
  client::MixRun mix;
  c10::IValue v;
  if (!archive.try_read("meta.mix_segments", v)) return mix;
  const std::vector<int64_t> segments = v.toIntVector();
  absl::StatusOr<std::vector<MixturePoint>> schedule = ReadPoints("meta.mix_schedule", archive);
  if (!schedule.ok()) return schedule.status();
  mix.schedule = *std::move(schedule);
  absl::StatusOr<std::vector<std::vector<MixturePoint>>> per_segment =
      ReadSegmentSchedules(archive);
  if (!per_segment.ok()) return per_segment.status();
  archive.read("meta.mix_data_fingerprint", v);
  mix.data_fingerprint = v.toStringRef();
  archive.read("meta.mix_samples_per_epoch", v);
  mix.samples_per_epoch = v.toInt();
  if (segments.size() % 3 != 0 ||
      (!per_segment->empty() && per_segment->size() != segments.size() / 3)) {
    return absl::DataLossError("meta.mix_*: lists of inconsistent lengths");
  }
  for (size_t i = 0; i < segments.size(); i += 3) {
    mix.segments.push_back(MixtureSegment{segments[i], segments[i + 1], segments[i + 2]});
  }
  mix.segment_schedules = *std::move(per_segment);
  return mix;
}

}  // namespace

std::string CheckpointFileName(int64_t epoch, int64_t next_batch) {
  return absl::StrFormat("ckpt-e%04d-b%06d.pt", epoch, next_batch);
}

absl::Status SaveCheckpoint(const std::string& path, TrainableModel& model,
                            torch::optim::Optimizer& optimizer,
                            const CheckpointPosition& position) {
  std::ostringstream bytes;
  try {
    torch::serialize::OutputArchive archive;
    for (auto& [name, tensor] : model.NamedParameters()) {
      archive.write("model." + name, tensor.detach());
    }
    for (auto& [name, tensor] : model.NamedBuffers()) {
      archive.write("model." + name, tensor.detach(), /*is_buffer=*/true);
    }
    torch::serialize::OutputArchive optimizer_archive;
    optimizer.save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("meta.format_version", c10::IValue(kFormatVersion));
    archive.write("meta.epoch", c10::IValue(position.epoch));
    archive.write("meta.next_batch", c10::IValue(position.next_batch));
    archive.write("meta.global_step", c10::IValue(position.global_step));
    archive.write("meta.world_size", c10::IValue(position.world_size));
    archive.write("meta.batch_size", c10::IValue(position.batch_size));
    archive.write("meta.fingerprint", c10::IValue(position.fingerprint));
    archive.write("meta.sample_offset", c10::IValue(position.sample_offset));
    // For readers of the file: what a resume on other ranks continues from.
    archive.write("meta.samples_consumed", c10::IValue(position.SamplesConsumed()));
    archive.write("meta.batches_in_epoch", c10::IValue(position.batches_in_epoch));
    if (!position.mix.segments.empty()) WriteMixRun(position.mix, archive);
    archive.save_to(bytes);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("writing checkpoint ", path, ": ", e.what()));
  }
  const std::string data = bytes.str();
  return WriteFileAtomically(path, data.data(), data.size());
}

namespace {

// LoadCheckpoint, with the optimizer left alone when `optimizer` is null.
absl::StatusOr<CheckpointPosition> LoadCheckpointInto(const std::string& path,
                                                      TrainableModel& model,
                                                      torch::optim::Optimizer* optimizer,
                                                      torch::Device device) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is unreadable: ", std::string(e.what()).substr(0, 300)));
  }
  CheckpointPosition position;
  try {
    c10::IValue v;
    archive.read("meta.format_version", v);
    if (v.toInt() != kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " has format version ",
                                                        v.toInt(), ", expected ", kFormatVersion));
    }
    archive.read("meta.epoch", v);
    position.epoch = v.toInt();
    archive.read("meta.next_batch", v);
    position.next_batch = v.toInt();
    archive.read("meta.global_step", v);
    position.global_step = v.toInt();
    archive.read("meta.world_size", v);
    position.world_size = v.toInt();
    archive.read("meta.batch_size", v);
    position.batch_size = v.toInt();
    archive.read("meta.fingerprint", v);
    position.fingerprint = v.toStringRef();
    // Absent from checkpoints written before elastic resume: their epochs began at 0.
    if (archive.try_read("meta.sample_offset", v)) position.sample_offset = v.toInt();
    // Absent from checkpoints written before mixtures resumed across runs.
    if (archive.try_read("meta.batches_in_epoch", v)) position.batches_in_epoch = v.toInt();
    absl::StatusOr<client::MixRun> mix = ReadMixRun(archive);
    if (!mix.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", mix.status().message()));
    }
    position.mix = *std::move(mix);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": missing or bad meta.* entry: ",
                                            std::string(e.what()).substr(0, 300)));
  }
  torch::NoGradGuard no_grad;
  auto restore = [&](const NamedTensors& tensors, bool is_buffer) -> absl::Status {
    for (auto& [name, tensor] : tensors) {
      torch::Tensor saved;
      try {
        if (!archive.try_read("model." + name, saved, is_buffer)) {
          return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " has no tensor '",
                                                            name, "' (a different model?)"));
        }
      } catch (const std::exception& e) {
        return absl::DataLossError(absl::StrCat("checkpoint ", path, ": reading '", name,
                                                "': ", std::string(e.what()).substr(0, 300)));
      }
      if (saved.sizes() != tensor.sizes()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", path, ": '", name, "' has shape ", c10::str(saved.sizes()),
            ", the model's is ", c10::str(tensor.sizes()), " (different model or num_classes?)"));
      }
      tensor.detach().copy_(saved);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = restore(model.NamedParameters(), false); !s.ok()) return s;
  if (absl::Status s = restore(model.NamedBuffers(), true); !s.ok()) return s;
  if (optimizer == nullptr) return position;
  try {
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer->load(optimizer_archive);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, ": optimizer state does not fit this optimizer (",
                     std::string(e.what()).substr(0, 300), ")"));
  }
  return position;
}

}  // namespace

absl::StatusOr<CheckpointPosition> LoadCheckpoint(const std::string& path, TrainableModel& model,
                                                  torch::optim::Optimizer& optimizer,
                                                  torch::Device device) {
  return LoadCheckpointInto(path, model, &optimizer, device);
}

absl::StatusOr<CheckpointPosition> LoadCheckpointModel(const std::string& path,
                                                       TrainableModel& model,
                                                       torch::Device device) {
  return LoadCheckpointInto(path, model, nullptr, device);
}

absl::StatusOr<std::string> SaveCheckpointInDir(const std::string& dir, int keep,
                                                TrainableModel& model,
                                                torch::optim::Optimizer& optimizer,
                                                const CheckpointPosition& position) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("--ckpt-dir ", dir, ": ", ec.message()));
  const std::string name = CheckpointFileName(position.epoch, position.next_batch);
  const std::string path = (fs::path(dir) / name).string();
  if (absl::Status s = SaveCheckpoint(path, model, optimizer, position); !s.ok()) return s;
  const std::string latest = name + "\n";
  if (absl::Status s =
          WriteFileAtomically((fs::path(dir) / "latest").string(), latest.data(), latest.size());
      !s.ok()) {
    return s;
  }
  // Names sort by (epoch, batch) thanks to the zero padding.
  std::vector<std::string> existing;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("ckpt-e", 0) == 0 && file.size() > 3 && file.substr(file.size() - 3) == ".pt") {
      existing.push_back(file);
    }
  }
  std::sort(existing.begin(), existing.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < existing.size(); ++i) {
    if (existing[i] != name) fs::remove(fs::path(dir) / existing[i], ec);
  }
  return path;
}

absl::StatusOr<std::string> ResolveResumePath(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec))
      return absl::NotFoundError(absl::StrCat("--resume ", path, ": no such file"));
    return path;
  }
  std::ifstream in(fs::path(path) / "latest");
  std::string name;
  if (!in || !std::getline(in, name)) {
    return absl::NotFoundError(absl::StrCat(
        "--resume ", path, ": a directory without a 'latest' file (no checkpoint yet?)"));
  }
  name = std::string(absl::StripAsciiWhitespace(name));
  const std::string file = (fs::path(path) / name).string();
  if (!fs::exists(file, ec)) {
    return absl::NotFoundError(
        absl::StrCat("--resume ", path, ": latest names ", name, ", which is missing"));
  }
  return file;
}

}  // namespace shardcast::train

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

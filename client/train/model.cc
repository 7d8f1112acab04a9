// TrainableModel implementations: nn::Module (ResNet-18, small CNN) and TorchScript.
#include "client/train/model.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/script.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/train/resnet.h"

namespace shardcast::train {
namespace {

namespace nn = torch::nn;

// conv-relu-pool x2 + linear. No BatchNorm, so data-parallel training on two halves of
// a batch is mathematically the same as training on the whole batch (the DDP
// equivalence test relies on that), and it is cheap enough for input benchmarks.
class SmallCnnImpl : public nn::Module {
 public:
  explicit SmallCnnImpl(int64_t num_classes) {
    conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)));
    conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)));
    fc_ = register_module("fc", nn::Linear(16, num_classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);
    return fc_->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::Linear fc_{nullptr};
};
TORCH_MODULE(SmallCnn);

template <typename Holder>
class NnModel : public TrainableModel {
 public:
  NnModel(Holder module, std::string description)
      : module_(std::move(module)), description_(std::move(description)) {}

  torch::Tensor ForwardImpl(const torch::Tensor& images) override {
    return module_->forward(images);
  }
  NamedTensors NamedParameters() override {
    NamedTensors out;
    for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }
  NamedTensors NamedBuffers() override {
    NamedTensors out;
    for (const auto& item : module_->named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }
  void SetTraining(bool training) override { module_->train(training); }
  void To(torch::Device device) override {
    module_->to(device);
    ApplyMemoryFormat();
  }
  absl::Status SaveFinal(const std::string& path) override {
    NamedTensors state = NamedParameters();
    for (auto& named : NamedBuffers()) state.push_back(std::move(named));
    return SaveStateDict(path, state);
  }
  std::string Describe() const override { return description_; }

 private:
  Holder module_;
  std::string description_;
};

class ScriptModel : public TrainableModel {
 public:
  // A jit::Module is a handle: copying it shares the module.
  ScriptModel(const torch::jit::Module& module, std::string path)
      : module_(module), path_(std::move(path)) {}

  torch::Tensor ForwardImpl(const torch::Tensor& images) override {
    return module_.forward({images}).toTensor();
  }
  NamedTensors NamedParameters() override {
    NamedTensors out;
    for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
    return out;
  }
  NamedTensors NamedBuffers() override {
    NamedTensors out;
    for (const auto& item : module_.named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
    return out;
  }
  void SetTraining(bool training) override { module_.train(training); }
  void To(torch::Device device) override {
    module_.to(device);
    ApplyMemoryFormat();
  }
  absl::Status SaveFinal(const std::string& path) override {
    const std::string tmp = path + ".tmp";
    try {
      module_.save(tmp);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("saving TorchScript module to ", path, ": ", e.what()));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("rename ", tmp, " -> ", path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  std::string Describe() const override { return absl::StrCat("TorchScript module ", path_); }

 private:
  torch::jit::Module module_;
  std::string path_;
};

}  // namespace

torch::Tensor TrainableModel::Forward(const torch::Tensor& images) {
  const torch::Tensor input =
      format_.channels_last ? images.contiguous(torch::MemoryFormat::ChannelsLast) : images;
  torch::Tensor logits;
  {
    AutocastScope autocast(format_.precision, input.device());
    logits = ForwardImpl(input);
  }
  return logits.to(torch::kFloat32);
}

void TrainableModel::SetComputeFormat(const ComputeFormat& format) {
  format_ = format;
  ApplyMemoryFormat();
}

void TrainableModel::ApplyMemoryFormat() {
  const torch::MemoryFormat memory_format =
      format_.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  torch::NoGradGuard no_grad;
  for (const NamedTensors& tensors : {NamedParameters(), NamedBuffers()}) {
    for (auto& [name, tensor] : tensors) {
      // set_data keeps the tensor's identity: the optimizer and the gradient reducer
      // hold these very tensors.
      if (tensor.dim() == 4) tensor.set_data(tensor.contiguous(memory_format));
    }
  }
}

std::vector<torch::Tensor> TrainableModel::Parameters() {
  std::vector<torch::Tensor> out;
  for (auto& [name, tensor] : NamedParameters()) {
    if (tensor.requires_grad()) out.push_back(tensor);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TrainableModel>> MakeModel(const ModelSpec& spec) {
  if (!spec.torchscript_path.empty()) {
    try {
      torch::jit::Module module = torch::jit::load(spec.torchscript_path);
      return std::unique_ptr<TrainableModel>(new ScriptModel(module, spec.torchscript_path));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model ", spec.torchscript_path, ": not a loadable TorchScript module: ", e.what()));
    }
  }
  if (spec.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 1, got ", spec.num_classes));
  }
  torch::manual_seed(spec.init_seed);
  if (spec.arch == "resnet18") {
    return std::unique_ptr<TrainableModel>(new NnModel<ResNet18>(
        ResNet18(spec.num_classes), absl::StrCat("ResNet-18, ", spec.num_classes, " classes")));
  }
  if (spec.arch == "small-cnn") {
    return std::unique_ptr<TrainableModel>(new NnModel<SmallCnn>(
        SmallCnn(spec.num_classes), absl::StrCat("small CNN, ", spec.num_classes, " classes")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --arch '", spec.arch, "' (expected resnet18 or small-cnn)"));
}

// Python's torch.save layout: a zip holding archive/data.pkl and one record per tensor
// storage (archive/data/0, ...). The pickle is written without type tags: with them
// (torch::pickle_save's default) the dict names torch.jit._pickle.restore_type_tag,
// a global that torch.load's safe mode (weights_only=True, the default since torch 2.6)
// refuses. Untagged, the file needs only what that mode allows: a dict, strings,
// torch._utils._rebuild_tensor_v2, torch.<Type>Storage and collections.OrderedDict.
absl::Status SaveStateDict(const std::string& path, const NamedTensors& tensors) {
  std::vector<char> container;
  try {
    c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
    // contiguous(): the standard layout whatever --channels-last computed in.
    for (const auto& [name, tensor] : tensors) {
      state.insert(name, tensor.detach().cpu().contiguous());
    }
    std::vector<char> pickle;
    torch::jit::Pickler pickler(
        [&pickle](const char* data, size_t size) {
          pickle.insert(pickle.end(), data, data + size);
        },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(c10::IValue(state));
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer([&container](const void* data, size_t size) {
      const char* bytes = static_cast<const char*>(data);
      container.insert(container.end(), bytes, bytes + size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("serializing the model for ", path, ": ", e.what()));
  }
  return WriteFileAtomically(path, container.data(), container.size());
}

absl::StatusOr<NamedTensors> LoadStateDict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  NamedTensors out;
  try {
    c10::IValue value = torch::pickle_load(bytes);
    for (const auto& entry : value.toGenericDict()) {
      out.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": not a state_dict file: ", e.what()));
  }
  return out;
}

absl::Status LoadWeights(const std::string& path, TrainableModel& model) {
  absl::StatusOr<NamedTensors> saved = LoadStateDict(path);
  if (!saved.ok()) return saved.status();
  std::map<std::string, torch::Tensor> by_name(saved->begin(), saved->end());
  torch::NoGradGuard no_grad;
  for (const NamedTensors& tensors : {model.NamedParameters(), model.NamedBuffers()}) {
    for (auto& [name, tensor] : tensors) {
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--weights ", path, " has no tensor '", name, "' (a different model?)"));
      }
      if (it->second.sizes() != tensor.sizes()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--weights ", path, ": '", name, "' has shape ", c10::str(it->second.sizes()),
            ", the model's is ", c10::str(tensor.sizes()), " (different model or num_classes?)"));
      }
      tensor.detach().copy_(it->second);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const char* data, size_t size) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", tmp, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status =
          absl::InternalError(absl::StrCat("write ", tmp, ": ", std::strerror(errno)));
      ::close(fd);
      ::unlink(tmp.c_str());
      return status;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("fsync/close ", tmp, ": ", std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("rename ", tmp, " -> ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardcast::train

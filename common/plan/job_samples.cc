// A job's selection of the dataset's samples (see job_samples.h).
#include "common/plan/job_samples.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace shardcast {

namespace {

// An extension from the data in a message: escaped, and cut where a hostile one would
// make the message long.
std::string ShortEscaped(absl::string_view untrusted) {
  constexpr size_t kMaxShown = 64;
  std::string shown = absl::CHexEscape(untrusted.substr(0, kMaxShown));
  if (untrusted.size() > kMaxShown) shown += "...";
  return shown;
}

// Extensions named in a refusal: the most common first, so that a hostile sample's
// thousands of members cannot make the message unbounded.
constexpr size_t kListedExtensions = 20;

// "txt (1000 samples), json (998 samples)": the extensions of the dataset's samples.
std::string ExtensionCounts(const DatasetIndex& index) {
  const std::map<std::string, int64_t> counts = index.MemberExtensionCounts();
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (size_t i = 0; i < sorted.size() && i < kListedExtensions; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", ShortEscaped(sorted[i].first), " (", sorted[i].second,
                    " samples)");
  }
  if (sorted.size() > kListedExtensions) {
    absl::StrAppend(&out, " and ", sorted.size() - kListedExtensions, " more");
  }
  return out.empty() ? "none" : out;
}

// Iterates `batches`, mapping each planned batch to the index's positions.
class MappedBatches final : public RankBatchIterator {
 public:
  MappedBatches(std::shared_ptr<const JobSamples> samples,
                std::unique_ptr<RankBatchIterator> batches)
      : samples_(std::move(samples)), batches_(std::move(batches)) {}

  bool Next(PlannedBatch* batch) override {
    if (!batches_->Next(batch)) return false;
    samples_->MapToIndex(batch);
    return true;
  }

 private:
  const std::shared_ptr<const JobSamples> samples_;
  const std::unique_ptr<RankBatchIterator> batches_;
};

// Iterates a mixed job's `batches`, mapping each sample by its own dataset's selection.
class MixtureMappedBatches final : public RankBatchIterator {
 public:
  MixtureMappedBatches(std::vector<std::shared_ptr<const JobSamples>> samples,
                       std::unique_ptr<RankBatchIterator> batches)
      : samples_(std::move(samples)), batches_(std::move(batches)) {}

  bool Next(PlannedBatch* batch) override {
    if (!batches_->Next(batch)) return false;
    for (SampleRef& ref : batch->samples) {
      if (ref.valid()) {
        ref.index = samples_[static_cast<size_t>(ref.dataset)]->IndexPosition(ref.shard, ref.index);
      }
    }
    return true;
  }

 private:
  const std::vector<std::shared_ptr<const JobSamples>> samples_;
  const std::unique_ptr<RankBatchIterator> batches_;
};

}  // namespace

std::vector<int32_t> FieldMembers(const SampleEntry& sample, const std::vector<FieldSpec>& fields) {
  std::vector<int32_t> members(fields.size(), kNoFieldMember);
  for (size_t f = 0; f < fields.size(); ++f) {
    for (const std::string& alternative : fields[f].alternatives) {
      for (size_t m = 0; m < sample.members.size() && members[f] == kNoFieldMember; ++m) {
        if (sample.members[m].ext == alternative) members[f] = static_cast<int32_t>(m);
      }
      if (members[f] != kNoFieldMember) break;
    }
  }
  return members;
}

uint64_t SentMemberBytes(const SampleEntry& sample, const std::vector<FieldSpec>& fields,
                         bool encoded_image, int64_t max_member_bytes) {
  uint64_t bytes = 0;
  for (int32_t member : FieldMembers(sample, fields)) {
    if (member != kNoFieldMember) bytes += sample.members[member].size;
  }
  const MemberRef* image = encoded_image ? ImageMember(sample) : nullptr;
  if (image != nullptr &&
      (max_member_bytes <= 0 || image->size <= static_cast<uint64_t>(max_member_bytes))) {
    bytes += image->size;
  }
  return bytes;
}

bool SendsEncodedImages(const JobConfig& config) {
  return config.image && config.delivery == ImageDelivery::kEncoded;
}

absl::StatusOr<std::shared_ptr<const JobSamples>> JobSamples::Select(const DatasetIndex& index,
                                                                     const JobConfig& config,
                                                                     int64_t max_member_bytes) {
  if (config.image && !index.has_images) {
    return absl::FailedPreconditionError(
        "the dataset has no image in any sample; ask for fields without an image "
        "(Loader(image=False, fields=...), --no-image --fields ...)");
  }
  // Not make_shared: the constructor is private.
  std::shared_ptr<JobSamples> selection(new JobSamples);
  selection->shard_sizes_ = index.ShardSampleCounts();
  selection->num_samples_ = index.num_samples;
  selection->positions_.resize(index.shards.size());
  if (config.fields.empty()) {
    if (SendsEncodedImages(config)) {
      // The image member alone: the largest image, kept in memory when the samples
      // are not.
      const uint64_t largest = index.LargestImageBytes();
      if (max_member_bytes <= 0 || largest <= static_cast<uint64_t>(max_member_bytes)) {
        selection->largest_sample_member_bytes_ = largest;
      } else {
        // Some image is over the limit (not read, not sent): the largest sent is the
        // largest under it, which only the samples know.
        for (uint32_t s = 0; s < index.shards.size(); ++s) {
          absl::Status read = ForEachSample(index, s, [&](uint32_t, const SampleEntry& sample) {
            selection->largest_sample_member_bytes_ =
                std::max(selection->largest_sample_member_bytes_,
                         SentMemberBytes(sample, {}, true, max_member_bytes));
          });
          if (!read.ok()) return read;
        }
      }
    }
    return selection;
  }

  std::map<std::string, int64_t> left_out;
  std::vector<int64_t> found(config.fields.size(), 0);  // samples that hold each field
  selection->num_samples_ = 0;
  for (size_t s = 0; s < index.shards.size(); ++s) {
    std::vector<uint32_t> positions;
    // From memory, or from the shard's table in the index cache (a released index):
    // selection reads each shard once, as the planner needs its selected count.
    const absl::Status read =
        ForEachSample(index, static_cast<uint32_t>(s), [&](uint32_t i, const SampleEntry& sample) {
          const std::vector<int32_t> members = FieldMembers(sample, config.fields);
          std::string reason;
          for (size_t f = 0; f < members.size(); ++f) {
            if (members[f] == kNoFieldMember) {
              if (!config.fields[f].optional && reason.empty()) {
                reason = absl::StrCat("missing required field '", config.fields[f].Name(), "'");
              }
              continue;
            }
            ++found[f];
            const MemberRef& member = sample.members[members[f]];
            if (max_member_bytes > 0 && member.size > static_cast<uint64_t>(max_member_bytes) &&
                reason.empty()) {
              reason = absl::StrCat("member '", ShortEscaped(member.ext),
                                    "' over --max-member-bytes (", max_member_bytes, " bytes)");
              selection->member_limit_reached_ = true;
            }
          }
          if (!reason.empty()) {
            ++left_out[reason];
            return;
          }
          positions.push_back(i);
          selection->largest_sample_member_bytes_ = std::max(
              selection->largest_sample_member_bytes_,
              SentMemberBytes(sample, config.fields, SendsEncodedImages(config), max_member_bytes));
        });
    if (!read.ok()) return read;
    const uint32_t shard_samples = selection->shard_sizes_[s];  // every sample, so far
    selection->shard_sizes_[s] = static_cast<uint32_t>(positions.size());
    selection->num_samples_ += static_cast<int64_t>(positions.size());
    if (positions.size() != shard_samples) {
      selection->selects_all_ = false;
      selection->positions_[s] = SelectedPositions(positions, shard_samples);
    }
  }
  for (size_t f = 0; f < config.fields.size(); ++f) {
    if (found[f] == 0 && !config.fields[f].optional) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fields: no sample of the dataset has '", config.fields[f].Name(),
          "'; its samples hold: ", ExtensionCounts(index),
          " (ask for one of these, or mark the field optional: '", config.fields[f].Name(), "?')"));
    }
  }
  for (auto& [reason, count] : left_out) selection->left_out_.push_back(LeftOut{reason, count});
  std::stable_sort(selection->left_out_.begin(), selection->left_out_.end(),
                   [](const LeftOut& a, const LeftOut& b) { return a.count > b.count; });
  if (selection->num_samples_ == 0) {
    std::string reasons;
    for (const LeftOut& out : selection->left_out_) {
      absl::StrAppend(&reasons, reasons.empty() ? "" : ", ", out.count, " ", out.reason);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("fields: the job leaves every sample of the dataset out (", reasons, ")"));
  }
  return selection;
}

int32_t JobSamples::IndexPosition(int32_t shard, int32_t selected) const {
  const SelectedPositions& positions = positions_[static_cast<size_t>(shard)];
  return positions.size() == 0
             ? selected
             : static_cast<int32_t>(positions.Position(static_cast<uint32_t>(selected)));
}

void JobSamples::MapToIndex(PlannedBatch* planned) const {
  for (SampleRef& ref : planned->samples) {
    if (ref.valid()) ref.index = IndexPosition(ref.shard, ref.index);
  }
}

std::unique_ptr<RankBatchIterator> JobSamples::MapToIndex(
    std::unique_ptr<RankBatchIterator> batches) const {
  if (selects_all_) return batches;
  return std::make_unique<MappedBatches>(shared_from_this(), std::move(batches));
}

std::unique_ptr<RankBatchIterator> MapMixtureToIndex(
    std::vector<std::shared_ptr<const JobSamples>> samples,
    std::unique_ptr<RankBatchIterator> batches) {
  return std::make_unique<MixtureMappedBatches>(std::move(samples), std::move(batches));
}

}  // namespace shardcast

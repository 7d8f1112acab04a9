// Prometheus text exposition of the server's figures (see metrics_text.h).
#include "server/status/metrics_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/plan/job_config.h"
#include "proto/status_fields.h"
#include "server/base/log.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

namespace {

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string* out, const std::string& name, const char* type, const char* help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  // `labels`: already rendered ("job=\"a\",rank=\"0\""), or empty.
  void Sample(double value, const std::string& labels = "", const char* suffix = "") {
    absl::StrAppend(out_, name_, suffix);
    if (!labels.empty()) absl::StrAppend(out_, "{", labels, "}");
    absl::StrAppend(out_, " ", FormatValue(value), "\n");
  }

 private:
  static std::string FormatValue(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
    // Integers exactly (counters of bytes pass 2^53 only after petabytes), the rest
    // with 15 significant digits (what a double holds for sure: 0.3 stays "0.3").
    if (value == std::floor(value) && std::fabs(value) < 9.007199254740992e15) {
      return absl::StrFormat("%.0f", value);
    }
    return absl::StrFormat("%.15g", value);
  }

  std::string* const out_;
  const std::string name_;
};

std::string Label(const char* name, const std::string& value) {
  return absl::StrCat(name, "=\"", PrometheusLabelValue(value), "\"");
}

// One of kIndexStates: the dataset's, or "draining" for all while the server drains.
// ("unknown": no series is 1.)
std::string IndexStateName(const v1::DatasetStatus& dataset, bool draining) {
  return draining ? "draining" : DatasetStateName(dataset.state());
}

}  // namespace

std::string PrometheusLabelValue(const std::string& value) {
  const std::string safe = LogSafe(value, kMaxJobIdLength);
  std::string out;
  out.reserve(safe.size());
  for (char c : safe) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string RenderPrometheusText(const MetricsSnapshot& snapshot) {
  const v1::GetStatusResponse& s = snapshot.status;
  std::string out;
  Family(&out, "shardcast_build_info", "gauge", "The server's version (value 1).")
      .Sample(1, Label("version", s.version()));

  // Every server-level figure of the reply that has a family: one row of the table each.
  for (const StatusField& row : StatusFields()) {
    if (row.type == MetricType::kNone) continue;
    Family(&out, row.metric, row.type == MetricType::kCounter ? "counter" : "gauge", row.help)
        .Sample(ReadStatusField(s, row).number);
  }

  // Per dataset, from the reply's datasets.
  {
    Family state(&out, "shardcast_index_state", "gauge",
                 "1 for the dataset's current index state, 0 for the others.");
    for (const v1::DatasetStatus& d : s.datasets()) {
      const std::string current = IndexStateName(d, snapshot.draining);
      for (const char* name : kIndexStates) {
        state.Sample(current == name ? 1 : 0,
                     absl::StrCat(Label("dataset", d.name()), ",", Label("state", name)));
      }
    }
    Family shards(&out, "shardcast_index_shards", "gauge", "Shards in the dataset's index.");
    for (const v1::DatasetStatus& d : s.datasets())
      shards.Sample(d.num_shards(), Label("dataset", d.name()));
    Family samples(&out, "shardcast_index_samples", "gauge", "Samples in the dataset's index.");
    for (const v1::DatasetStatus& d : s.datasets()) {
      samples.Sample(static_cast<double>(d.num_samples()), Label("dataset", d.name()));
    }
    Family skipped(&out, "shardcast_index_skipped_samples", "gauge",
                   "Samples the index skipped (no image, bad label, ...).");
    for (const v1::DatasetStatus& d : s.datasets()) {
      skipped.Sample(static_cast<double>(d.skipped_samples()), Label("dataset", d.name()));
    }
    Family problems(&out, "shardcast_shard_problems", "gauge",
                    "Shards not served: skipped (left out of the index), changed (found "
                    "changed since indexing; streams that read them fail until a restart) or "
                    "unreadable (the host failed their last read: EMFILE, EACCES, EIO...).");
    for (const v1::DatasetStatus& d : s.datasets()) {
      const std::string dataset = Label("dataset", d.name());
      problems.Sample(d.total_skipped_shards(),
                      absl::StrCat(dataset, ",", Label("problem", "skipped")));
      problems.Sample(d.total_changed_shards(),
                      absl::StrCat(dataset, ",", Label("problem", "changed")));
      problems.Sample(d.total_unreadable_shards(),
                      absl::StrCat(dataset, ",", Label("problem", "unreadable")));
    }
  }

  {
    const DurationHistogram::Snapshot& h = snapshot.decode_time;
    Family decode(&out, "shardcast_decode_duration_seconds", "histogram",
                  "Read, decode and transform time of one sample.");
    int64_t cumulative = 0;
    for (size_t i = 0; i < DurationHistogram::kBounds.size(); ++i) {
      cumulative += h.counts[i];
      decode.Sample(cumulative, Label("le", absl::StrFormat("%g", DurationHistogram::kBounds[i])),
                    "_bucket");
    }
    decode.Sample(h.count, Label("le", "+Inf"), "_bucket");
    decode.Sample(h.sum_seconds, "", "_sum");
    decode.Sample(h.count, "", "_count");
  }

  // Jobs and ranks.
  {
    Family ranks(&out, "shardcast_job_registered_ranks", "gauge", "Ranks registered in the job.");
    for (const v1::JobStatus& job : s.jobs())
      ranks.Sample(job.total_ranks(), Label("job", job.job_id()));
    Family world(&out, "shardcast_job_world_size", "gauge", "The job's world size.");
    for (const v1::JobStatus& job : s.jobs())
      world.Sample(job.world_size(), Label("job", job.job_id()));
    Family batch(&out, "shardcast_job_batch_size", "gauge", "Samples per batch of every rank.");
    for (const v1::JobStatus& job : s.jobs())
      batch.Sample(job.batch_size(), Label("job", job.job_id()));
    Family n(&out, "shardcast_job_batches_per_epoch", "gauge",
             "Batches every rank gets per epoch.");
    for (const v1::JobStatus& job : s.jobs()) {
      n.Sample(job.batches_per_epoch(), Label("job", job.job_id()));
    }
    Family stalled(&out, "shardcast_job_stalled_ranks", "gauge",
                   "The job's ranks flagged stalled (--stall-warn).");
    for (const v1::JobStatus& job : s.jobs())
      stalled.Sample(job.stalled_ranks(), Label("job", job.job_id()));
    Family image(&out, "shardcast_job_image", "gauge",
                 "1 when the job's batches carry images, 0 for a members-only job.");
    for (const v1::JobStatus& job : s.jobs())
      image.Sample(job.image() ? 1 : 0, Label("job", job.job_id()));
    Family left_out(&out, "shardcast_job_left_out_samples", "gauge",
                    "Samples of the dataset the job's plan leaves out, by reason (a required "
                    "field missing, a member over --max-member-bytes).");
    for (const v1::JobStatus& job : s.jobs()) {
      for (const v1::ReasonCount& reason : job.left_out()) {
        left_out.Sample(
            static_cast<double>(reason.count()),
            absl::StrCat(Label("job", job.job_id()), ",", Label("reason", reason.reason())));
      }
    }
  }
  // A mixed job's datasets (JobStatus.mix), labelled by job and dataset.
  {
    Family epoch(&out, "shardcast_job_samples_per_epoch", "gauge",
                 "A mixed job's epoch length in samples (0 for a job of one dataset).");
    for (const v1::JobStatus& job : s.jobs()) {
      epoch.Sample(static_cast<double>(job.samples_per_epoch()), Label("job", job.job_id()));
    }
    const auto per_dataset = [&out, &s](const std::string& name, const char* help,
                                        double (*value)(const v1::MixDatasetStatus&)) {
      Family family(&out, name, "gauge", help);
      for (const v1::JobStatus& job : s.jobs()) {
        for (const v1::MixDatasetStatus& d : job.mix()) {
          family.Sample(value(d),
                        absl::StrCat(Label("job", job.job_id()), ",", Label("dataset", d.name())));
        }
      }
    };
    per_dataset("shardcast_job_mix_weight",
                "A mixed job's weight of the dataset at its most advanced rank's step.",
                [](const v1::MixDatasetStatus& d) { return d.weight(); });
    per_dataset(
        "shardcast_job_mix_samples_drawn",
        "Samples of the dataset in a mixed job's sequence up to its most advanced step.",
        [](const v1::MixDatasetStatus& d) { return static_cast<double>(d.samples_drawn()); });
    per_dataset("shardcast_job_mix_pass", "The pass a mixed job is in over the dataset (0: first).",
                [](const v1::MixDatasetStatus& d) { return static_cast<double>(d.pass()); });
    per_dataset(
        "shardcast_job_mix_pass_position",
        "Samples of the dataset's current pass a mixed job has drawn.",
        [](const v1::MixDatasetStatus& d) { return static_cast<double>(d.pass_position()); });
    per_dataset("shardcast_job_mix_dataset_samples",
                "Usable samples of the dataset in a mixed job: the length of its passes.",
                [](const v1::MixDatasetStatus& d) { return static_cast<double>(d.num_samples()); });
  }
  // Per rank: each family's samples together, as the format requires.
  const auto per_rank = [&out, &s](const std::string& name, const char* type, const char* help,
                                   double (*value)(const v1::JobStatus&, const v1::RankStatus&)) {
    Family family(&out, name, type, help);
    for (const v1::JobStatus& job : s.jobs()) {
      for (const v1::RankStatus& rank : job.ranks()) {
        family.Sample(value(job, rank), absl::StrCat(Label("job", job.job_id()), ",",
                                                     Label("rank", absl::StrCat(rank.rank()))));
      }
    }
  };
  per_rank("shardcast_rank_position_batches", "gauge",
           "The rank's next batch in the job's global order (epoch * n + batch).",
           [](const v1::JobStatus& job, const v1::RankStatus& rank) {
             return static_cast<double>(rank.epoch() * job.batches_per_epoch() + rank.next_batch());
           });
  per_rank("shardcast_rank_epoch", "gauge", "The epoch of the rank's stream.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.epoch());
           });
  per_rank("shardcast_rank_lag_batches", "gauge",
           "Batches the rank is behind its job's most advanced rank.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.lag_batches());
           });
  per_rank("shardcast_rank_seconds_since_last_batch", "gauge",
           "Seconds since the rank last took a batch (or opened its stream).",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return rank.seconds_since_last_batch();
           });
  per_rank(
      "shardcast_rank_stalled", "gauge", "1 while the rank is flagged stalled (--stall-warn).",
      [](const v1::JobStatus&, const v1::RankStatus& rank) { return rank.stalled() ? 1.0 : 0.0; });
  per_rank("shardcast_rank_streaming", "gauge", "1 while the rank has a stream open.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return rank.streaming() ? 1.0 : 0.0;
           });
  per_rank("shardcast_rank_window_batches", "gauge",
           "Batches ready or being assembled ahead of the rank's client.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.window_depth());
           });
  per_rank("shardcast_rank_batches_sent_total", "counter",
           "Batches sent to the rank since it registered.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.batches_sent());
           });
  return out;
}

}  // namespace shardcast::server

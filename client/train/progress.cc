// Progress bar rendering (terminal and log-file forms).
#include "client/train/progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace shardcast::train {
namespace {

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 360000) return "--:--";
  const int64_t s = std::llround(seconds);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%02d:%02d", s / 60, s % 60);
}

}  // namespace

ProgressBar::ProgressBar(std::FILE* out, bool enabled, bool tty, bool live)
    : out_(out), enabled_(enabled), tty_(tty && live), live_(live) {}

void ProgressBar::StartEpoch(int64_t epoch, int64_t epochs, int64_t batches, int64_t start_batch) {
  epoch_ = epoch;
  epochs_ = epochs;
  batches_ = batches;
  start_batch_ = start_batch;
  epoch_start_ = std::chrono::steady_clock::now();
  last_draw_ = {};
  last_plain_decile_ = start_batch * 10 / std::max<int64_t>(1, batches);
}

std::string ProgressBar::Render(int64_t done, double images_per_s, double loss, double acc) const {
  constexpr int kWidth = 24;
  const double fraction = batches_ > 0 ? static_cast<double>(done) / batches_ : 1.0;
  const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  const int64_t this_run = done - start_batch_;
  const double eta = this_run > 0 ? elapsed / this_run * (batches_ - done) : -1;
  return absl::StrFormat(
      "epoch %d/%d [%s%s] %d/%d %3.0f%% | %.1f img/s | loss %.4f | top1 %.2f%% | %s<%s", epoch_ + 1,
      epochs_, std::string(filled, '#'), std::string(kWidth - filled, '.'), done, batches_,
      100 * fraction, images_per_s, loss, 100 * acc, FormatDuration(elapsed), FormatDuration(eta));
}

std::string ProgressBar::Summary(int64_t done, double images_per_s, double loss, double acc,
                                 double seconds) const {
  return absl::StrFormat(
      "epoch %d/%d: %d/%d batches | %.1f img/s | loss %.4f | top1 %.2f%% | %.1f s", epoch_ + 1,
      epochs_, done, batches_, images_per_s, loss, 100 * acc, seconds);
}

void ProgressBar::Update(int64_t done, double images_per_s, double loss, double acc) {
  if (!enabled_ || !live_) return;
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < batches_) return;
    last_draw_ = now;
    std::fprintf(out_, "\r%s\x1b[K", Render(done, images_per_s, loss, acc).c_str());
    std::fflush(out_);
    return;
  }
  // Log files: one line per 10% of the epoch, or every 30 s when batches are slow.
  const int64_t decile = done * 10 / std::max<int64_t>(1, batches_);
  if (decile > last_plain_decile_ || now - last_draw_ > std::chrono::seconds(30)) {
    last_plain_decile_ = decile;
    last_draw_ = now;
    if (done < batches_) {
      std::fprintf(out_, "%s\n", Render(done, images_per_s, loss, acc).c_str());
      std::fflush(out_);
    }
  }
}

void ProgressBar::Note(const std::string& line) {
  if (!enabled_) return;
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ProgressBar::FinishEpoch(int64_t done, double images_per_s, double loss, double acc,
                              double seconds, int64_t substituted) {
  if (!enabled_) return;
  const std::string masked = substituted > 0
                                 ? absl::StrFormat(" | %d undecodable sample%s left out",
                                                   substituted, substituted == 1 ? "" : "s")
                                 : std::string();
  if (!live_) {
    std::fprintf(out_, "%s%s\n", Summary(done, images_per_s, loss, acc, seconds).c_str(),
                 masked.c_str());
    std::fflush(out_);
    return;
  }
  std::fprintf(out_, "%s%s (%.1f s)%s\n", tty_ ? "\r" : "",
               Render(done, images_per_s, loss, acc).c_str(), seconds, masked.c_str());
  std::fflush(out_);
}

}  // namespace shardcast::train

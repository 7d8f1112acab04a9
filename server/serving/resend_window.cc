// The benchmark-only re-sending window (see resend_window.h).
#include "server/serving/resend_window.h"

#include <algorithm>
#include <utility>

namespace shardcast::server {

namespace {

// The window underneath assembles the first batch only.
BatchWindow::Options FirstBatchOnly(BatchWindow::Options options) {
  options.count = std::min<int64_t>(1, options.count);
  return options;
}

}  // namespace

std::shared_ptr<BatchWindow> ResendFirstBatchWindow::Create(
    BatchAssembler* assembler, std::unique_ptr<RankBatchIterator> batches, const Options& options) {
  std::shared_ptr<BatchWindow> window(
      new ResendFirstBatchWindow(assembler, std::move(batches), options));
  WatchMemory(window);
  return window;
}

ResendFirstBatchWindow::ResendFirstBatchWindow(BatchAssembler* assembler,
                                               std::unique_ptr<RankBatchIterator> batches,
                                               const Options& options)
    : BatchWindow(assembler, std::move(batches), FirstBatchOnly(options)), count_(options.count) {}

absl::StatusOr<BatchWindow::TakeResult> ResendFirstBatchWindow::Take(
    std::shared_ptr<AssembledBatch>* batch, std::function<void()> on_ready) {
  {
    absl::MutexLock lock(&resend_mu_);
    if (cancelled_ || taken_ >= count_) return TakeResult::kEnd;
    if (first_batch_ != nullptr) {
      // Stamped with the position it goes out at, so that clients' sequence checks
      // take it (the Loader and BatchStream measured client-bound). The previous
      // write's header was serialized when it started, so changing it now is safe.
      first_batch_->header().set_index(first_index_ + taken_);
      *batch = first_batch_;
      ++taken_;
      return TakeResult::kBatch;
    }
  }
  // The caller serializes Take, so the first batch is taken here once.
  absl::StatusOr<TakeResult> taken = BatchWindow::Take(batch, std::move(on_ready));
  if (taken.ok() && *taken == TakeResult::kBatch) {
    absl::MutexLock lock(&resend_mu_);
    ++taken_;
    // Kept only while the stream lives: a Cancel meanwhile released what it holds.
    if (!cancelled_) {
      first_batch_ = *batch;
      first_index_ = first_batch_->header().index() - (taken_ - 1);
    }
  }
  return taken;
}

void ResendFirstBatchWindow::Cancel() {
  {
    absl::MutexLock lock(&resend_mu_);
    cancelled_ = true;
    first_batch_.reset();
  }
  BatchWindow::Cancel();
}

int64_t ResendFirstBatchWindow::taken() const {
  absl::MutexLock lock(&resend_mu_);
  return taken_;
}

}  // namespace shardcast::server

// BENCHMARK ONLY (ServerOptions::bench_only_resend_first_batch, --bench-only-resend-
// first-batch): a stream whose window assembles its first batch once and re-sends that
// same batch for every later one, so that a benchmark measures the wire and the clients
// without the decode. Kept out of BatchWindow, which serves real streams: this is a
// BatchWindow of one batch with the re-sending around it.
#ifndef SHARDCAST_SERVER_SERVING_RESEND_WINDOW_H_
#define SHARDCAST_SERVER_SERVING_RESEND_WINDOW_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/serving/batch_window.h"

namespace shardcast::server {

class ResendFirstBatchWindow final : public BatchWindow {
 public:
  // `options.count` batches are sent; only the first is assembled.
  // REQUIRES: as BatchWindow::Create.
  static std::shared_ptr<BatchWindow> Create(BatchAssembler* assembler,
                                             std::unique_ptr<RankBatchIterator> batches,
                                             const Options& options);

  // The first batch as BatchWindow::Take gives it; after it, the same batch again,
  // stamped with the position it goes out at, until `count` were sent.
  absl::StatusOr<TakeResult> Take(std::shared_ptr<AssembledBatch>* batch,
                                  std::function<void()> on_ready) override
      ABSL_LOCKS_EXCLUDED(resend_mu_);
  void Cancel() override ABSL_LOCKS_EXCLUDED(resend_mu_);
  int64_t taken() const override ABSL_LOCKS_EXCLUDED(resend_mu_);

 private:
  ResendFirstBatchWindow(BatchAssembler* assembler, std::unique_ptr<RankBatchIterator> batches,
                         const Options& options);

  const int64_t count_;  // batches this stream sends
  mutable absl::Mutex resend_mu_;
  bool cancelled_ ABSL_GUARDED_BY(resend_mu_) = false;
  int64_t taken_ ABSL_GUARDED_BY(resend_mu_) = 0;
  // The first batch, kept to be re-sent, and the index it was sent with.
  std::shared_ptr<AssembledBatch> first_batch_ ABSL_GUARDED_BY(resend_mu_);
  int64_t first_index_ ABSL_GUARDED_BY(resend_mu_) = 0;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_RESEND_WINDOW_H_

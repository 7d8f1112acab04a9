// Rank 0's per-epoch progress bar on stderr: batches i/n, images/s, loss and top-1
// averaged over ranks. A \r-updated line on a terminal, periodic plain lines otherwise;
// without the live bar (--no-progress), one summary line per epoch.
#ifndef SHARDCAST_CLIENT_TRAIN_PROGRESS_H_
#define SHARDCAST_CLIENT_TRAIN_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace shardcast::train {

class ProgressBar {
 public:
  // Draws nothing when !enabled. `tty` chooses the \r-updated form. !live: nothing
  // while an epoch runs, only its summary line when it ends.
  ProgressBar(std::FILE* out, bool enabled, bool tty, bool live = true);

  void StartEpoch(int64_t epoch, int64_t epochs, int64_t batches, int64_t start_batch);
  // `done` batches of the epoch consumed; loss/acc: running averages over all ranks.
  void Update(int64_t done, double images_per_s, double loss, double acc);
  // Ends the epoch's line (the final state is always shown); `substituted` (all ranks:
  // samples the server could not decode, left out of loss and accuracy) when any.
  void FinishEpoch(int64_t done, double images_per_s, double loss, double acc, double seconds,
                   int64_t substituted = 0);

  // Prints one line of its own (e.g. an evaluation's result) when enabled.
  void Note(const std::string& line);

  // The line as drawn (without \r or newline); public for tests.
  std::string Render(int64_t done, double images_per_s, double loss, double acc) const;
  // The end-of-epoch line without the bar (!live).
  std::string Summary(int64_t done, double images_per_s, double loss, double acc,
                      double seconds) const;

 private:
  std::FILE* out_;
  bool enabled_;
  bool tty_;
  bool live_;
  int64_t epoch_ = 0;
  int64_t epochs_ = 0;
  int64_t batches_ = 0;
  int64_t start_batch_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t last_plain_decile_ = -1;
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_PROGRESS_H_

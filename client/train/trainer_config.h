// TrainerConfig: the training loop's settings as the command line gives them (epochs,
// optimizer, checkpoints, evaluation cadence). Torch-free, so that TrainOptions
// (train_options.h) can be one: the flag parser fills these fields directly and the
// Trainer (trainer.h) takes them as they are, with no field copied by hand.
#ifndef SHARDCAST_CLIENT_TRAIN_TRAINER_CONFIG_H_
#define SHARDCAST_CLIENT_TRAIN_TRAINER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

namespace shardcast::train {

struct TrainerConfig {
  int epochs = 10;
  int64_t max_steps = 0;  // 0 = no limit
  std::string optimizer = "adam";
  double lr = 1e-4;
  std::vector<double> betas = {0.9, 0.999};
  double momentum = 0.9;
  double weight_decay = 0.0;
  double bucket_mb = 25.0;
  bool log_keys = false;
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  int ckpt_keep = 3;
  std::string resume;  // a checkpoint file or a --ckpt-dir (its latest)
  std::string save;    // "{rank}": every rank saves; else rank 0 only
  // Evaluation after every `val_every` epochs and after the last one (when the Trainer
  // is given an evaluator). The model with the best val top-1 so far is saved to
  // BestModelPath(save) (needs save).
  int val_every = 1;
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_TRAINER_CONFIG_H_

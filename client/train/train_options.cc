// (being written) shardcast-train: train_options

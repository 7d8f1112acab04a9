// (being written) shardcast-train: train_main

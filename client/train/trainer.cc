// (being written) shardcast-train: trainer

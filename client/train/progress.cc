// (being written) shardcast-train: progress

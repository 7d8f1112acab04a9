// (being written) shardcast-train: checkpoint

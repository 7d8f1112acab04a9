// (being written) shardcast-train: metrics

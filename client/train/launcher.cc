// (being written) shardcast-train: launcher

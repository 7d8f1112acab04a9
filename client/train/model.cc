// (being written) shardcast-train: model

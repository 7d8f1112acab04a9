// (being written) shardcast-train: batch_source

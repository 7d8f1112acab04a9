// (being written) shardcast-train: ddp

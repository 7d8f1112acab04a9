// (being written) shardcast-train: resnet

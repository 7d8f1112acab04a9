// The job's flags, defined once for every binary that takes them: the server (its
// defaults for what a registration leaves unset) and the trainer (what it asks for).
// A new job setting is one entry here, one field in JobOverrides and one in the proto.
#ifndef SHARDCAST_COMMON_JOB_FLAGS_H_
#define SHARDCAST_COMMON_JOB_FLAGS_H_

#include "common/flags.h"
#include "common/job_config.h"

namespace shardcast {

// Adds --batch-size (-b, --batch_size), --split, --remainder, --workers (-w,
// --num_workers), --seed, --shuffle [N] (the seed's: shard shuffle plus a buffer of N;
// negative = off), --shuffle-shards, --shuffle-buffer, --block-size, --transform,
// --resize and --crop to `flags`, each storing into `*overrides` when given.
// `defaults` is what an unset flag means, shown in --help.
// REQUIRES: `overrides` outlives flags->Parse().
void AddJobFlags(FlagSet* flags, const JobConfig& defaults, JobOverrides* overrides);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_JOB_FLAGS_H_

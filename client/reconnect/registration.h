// A rank's first registration, with retries: each attempt fails fast, the next replica is
// tried at once, and a round of replicas that reached none waits its backoff (the one
// retry policy of common/util, on a wait a stop ends) until the reconnect deadline.
#ifndef SHARDCAST_CLIENT_RECONNECT_REGISTRATION_H_
#define SHARDCAST_CLIENT_RECONNECT_REGISTRATION_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/base/stream_settings.h"
#include "client/reconnect/replica_order.h"
#include "common/util/clock.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

// One Register call to the replica in use, that gives up at `give_up`; its outcome as
// the gRPC edge converted it (client/rpc/channel.h, FromGrpc).
using RegisterAttempt =
    std::function<absl::Status(absl::Time give_up, shardcast::v1::RegisterResponse* response)>;

// Registers `job` by `attempt`, moving through `replicas` (the one that answered is
// replicas->current() after). Errors: a status a retry cannot fix (the server's refusal,
// a failed TLS handshake: WithContext naming job, rank and replica), a handshake
// refused for handshake_refusal_seconds, UNAVAILABLE once reconnect_deadline_seconds
// passed (with the attempts and the last error), or CANCELLED (InterruptedError) once
// `stop` is cancelled.
absl::StatusOr<shardcast::v1::RegisterResponse> RegisterWithRetry(
    const StreamSettings& settings, const shardcast::v1::RegisterRequest& job,
    ReplicaOrder* replicas, const RegisterAttempt& attempt, const util::CancelToken& stop);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_REGISTRATION_H_

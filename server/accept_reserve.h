// The last line of defence against running out of descriptors at accept: a spare
// descriptor, freed to take and close a connection when accept4 fails with EMFILE, so
// that gRPC's listening port lives on (docs/server.md, "Descriptors").
//
// gRPC 1.51 stops a listening port for good when accept4 fails with EMFILE or ENFILE
// (tcp_server_posix.cc logs "Failed accept4" and never arms the port again). The
// descriptor budget (net/descriptor_limit.h) sizes the accept queue and
// --max-connections so that one accept round cannot reach the limit, but connections
// that arrive while a round runs are taken in the same round: a flood faster than the
// server accepts still reached the limit at a hard limit of 64. This module defines
// accept4 in the server's executable (which the dynamic linker binds gRPC's calls to
// before libc's): when libc's accept4 fails for want of descriptors, it frees the spare,
// accepts and closes every queued connection with it (their clients see the connection
// closed, as for any refusal, and retry), takes the spare back, and answers EAGAIN,
// which gRPC takes as "nothing more to accept now" and keeps the port armed. Refusals
// are counted and logged at most once a second.
//
// Only the executable links it (server/CMakeLists.txt): tests that run the daemon in
// their own process keep libc's accept4.
#ifndef SHARDCAST_SERVER_ACCEPT_RESERVE_H_
#define SHARDCAST_SERVER_ACCEPT_RESERVE_H_

#include <cstdint>

namespace shardcast::server {

// Opens the spare descriptor. Until it is called, accept4 is libc's unchanged. Call
// once, before the listener starts; false when the spare could not be opened (then
// nothing changes).
bool ReserveAcceptDescriptor();

// Connections refused for want of descriptors since the start.
int64_t ConnectionsRefusedOutOfDescriptors();

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ACCEPT_RESERVE_H_

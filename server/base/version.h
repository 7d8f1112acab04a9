// The server's version string (reported by Register and GetStatus).
#ifndef SHARDCAST_SERVER_BASE_VERSION_H_
#define SHARDCAST_SERVER_BASE_VERSION_H_

namespace shardcast::server {

#ifndef SHARDCAST_VERSION_STRING
#define SHARDCAST_VERSION_STRING "0.0.0"
#endif
inline constexpr char kServerVersion[] = SHARDCAST_VERSION_STRING;

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_BASE_VERSION_H_

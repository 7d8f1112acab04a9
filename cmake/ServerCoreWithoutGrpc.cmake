# The server's core rooms link no gRPC (docs/design.md, server/CMakeLists.txt).
#
# The rule that the serving core never sees gRPC is a build rule, in two halves:
# server/base/no_grpc.h, forced into every core room's compilation, fails the build at
# an #include of a gRPC header; and this check, run at configure time after every
# target is defined, fails the configure step when a core room's link closure (its link
# libraries and, transitively, theirs; $<LINK_ONLY:...> entries included, since they
# link) reaches a gRPC library or the generated gRPC services (shardcast_proto), naming
# the chain that leads there.

include(${CMAKE_CURRENT_LIST_DIR}/LinkClosure.cmake)

function(shardcast_check_server_core_without_grpc)
  get_property(rooms GLOBAL PROPERTY SHARDCAST_SERVER_CORE_ROOMS)
  if(NOT rooms)
    message(FATAL_ERROR "no core rooms registered: server/CMakeLists.txt's "
                        "shardcast_server_room(... CORE ...) should have named them")
  endif()
  set(offenders "")
  foreach(room ${rooms})
    shardcast_link_closure(${room} chains)
    foreach(chain ${chains})
      if(chain MATCHES "^(gRPC::[^<]*|shardcast_proto)<-")
        string(APPEND offenders "\n  ${chain}")
        break()
      endif()
    endforeach()
  endforeach()
  if(offenders)
    message(FATAL_ERROR "A core room of the server links gRPC:${offenders}\n"
      "(cmake/ServerCoreWithoutGrpc.cmake says why). The core rooms (base, net, assembly, "
      "status, serving) link the messages alone (shardcast_proto_messages); code that "
      "needs gRPC goes in server/rpc/.")
  endif()
endfunction()

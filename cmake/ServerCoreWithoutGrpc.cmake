# The server's core rooms link no gRPC (docs/design.md, server/CMakeLists.txt).
#
# The rule that the serving core never sees gRPC is a build rule, in two halves:
# server/base/no_grpc.h, forced into every core room's compilation, fails the build at
# an #include of a gRPC header; and this check, run at configure time after every
# target is defined, fails the configure step when a core room's link closure (its link
# libraries and, transitively, theirs; $<LINK_ONLY:...> entries included, since they
# link) reaches a gRPC library or the generated gRPC services (shardcast_proto), naming
# the chain that leads there.

include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/LinkClosure.cmake)

# Appends to `offenders_var` one chain per core room (the targets the global property
# `property` names) whose link closure reaches a gRPC library or shardcast_proto.
# The client's core rooms are checked by it too (cmake/ClientRooms.cmake).
function(shardcast_core_rooms_linking_grpc property offenders_var)
  set(offenders ${${offenders_var}})
  get_property(rooms GLOBAL PROPERTY ${property})
  if(NOT rooms)
    message(FATAL_ERROR "no core rooms registered in ${property}: the rooms' "
                        "CMakeLists.txt (... CORE ...) should have named them")
  endif()
  foreach(room ${rooms})
    shardcast_link_closure(${room} chains)
    foreach(chain ${chains})
      if(chain MATCHES "^(gRPC::[^<]*|shardcast_proto)<-")
        list(APPEND offenders "${room} links gRPC: ${chain}")
        break()
      endif()
    endforeach()
  endforeach()
  set(${offenders_var} ${offenders} PARENT_SCOPE)
endfunction()

function(shardcast_check_server_core_without_grpc)
  set(offenders "")
  shardcast_core_rooms_linking_grpc(SHARDCAST_SERVER_CORE_ROOMS offenders)
  if(offenders)
    list(JOIN offenders "\n  " listed)
    message(FATAL_ERROR "A core room of the server links gRPC:\n  ${listed}\n"
      "(cmake/ServerCoreWithoutGrpc.cmake says why). The core rooms (base, net, assembly, "
      "status, serving) link the messages alone (shardcast_proto_messages); code that "
      "needs gRPC goes in server/rpc/.")
  endif()
endfunction()

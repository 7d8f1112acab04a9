# The server's core rooms link no gRPC (docs/design.md, server/CMakeLists.txt).
#
# The rule that the serving core never sees gRPC is a build rule, in two halves:
# server/base/no_grpc.h, forced into every core room's compilation, fails the build at
# an #include of a gRPC header; and this check, run at configure time after every
# target is defined, fails the configure step when a core room's link closure (its link
# libraries and, transitively, theirs; $<LINK_ONLY:...> entries included, since they
# link) reaches a gRPC library or the generated gRPC services (shardcast_proto), naming
# the chain that leads there.

# Appends to `out_var` every target that `target` links, directly or through the
# targets it links, as "dep<-parent<-...<-target" chains.
function(_shardcast_link_closure target chain visited_var out_var)
  set(visited ${${visited_var}})
  set(out ${${out_var}})
  get_target_property(type ${target} TYPE)
  set(props INTERFACE_LINK_LIBRARIES)
  if(NOT type STREQUAL "INTERFACE_LIBRARY" AND chain STREQUAL target)
    list(APPEND props LINK_LIBRARIES)
  endif()
  foreach(prop ${props})
    get_target_property(deps ${target} ${prop})
    if(NOT deps)
      continue()
    endif()
    foreach(dep ${deps})
      if(dep MATCHES "^\\$<LINK_ONLY:(.*)>$")
        set(dep ${CMAKE_MATCH_1})
      endif()
      if(dep MATCHES "^\\$<" OR NOT TARGET ${dep})
        continue()
      endif()
      get_target_property(aliased ${dep} ALIASED_TARGET)
      if(aliased)
        set(dep ${aliased})
      endif()
      if(dep IN_LIST visited)
        continue()
      endif()
      list(APPEND visited ${dep})
      list(APPEND out "${dep}<-${chain}")
      _shardcast_link_closure(${dep} "${dep}<-${chain}" visited out)
    endforeach()
  endforeach()
  set(${visited_var} ${visited} PARENT_SCOPE)
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()

function(shardcast_check_server_core_without_grpc)
  get_property(rooms GLOBAL PROPERTY SHARDCAST_SERVER_CORE_ROOMS)
  if(NOT rooms)
    message(FATAL_ERROR "no core rooms registered: server/CMakeLists.txt's "
                        "shardcast_server_room(... CORE ...) should have named them")
  endif()
  set(offenders "")
  foreach(room ${rooms})
    set(visited ${room})
    set(chains "")
    _shardcast_link_closure(${room} ${room} visited chains)
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

# The client's rooms (client/CMakeLists.txt, docs/design.md's map), checked at configure
# time as the server's are (cmake/ServerRooms.cmake, whose readers this uses):
#
# - client/base, the ground floor, includes only itself and common/util;
# - every other room includes only itself, the rooms below it and common/, proto/ and
#   the generated messages:
#       base <- checks <- reconnect <- rpc <- stream;  base <- decode <- rpc
# - no two files of one room include each other's headers;
# - the core rooms (base, checks, decode, reconnect) write no `#include <grpc...>` and
#   no generated *.grpc.pb.h (client/base/no_grpc.h, forced into their compilation,
#   fails the build at one reached through another header), and their link closure
#   reaches neither gRPC nor the generated services (shardcast_proto).

include(${CMAKE_CURRENT_LIST_DIR}/ServerRooms.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/LinkClosure.cmake)

function(shardcast_check_client_rooms)
  set(below_base "")
  set(below_checks base)
  set(below_decode base)
  set(below_reconnect base checks)
  set(below_rpc base checks decode reconnect)
  set(below_stream base checks decode reconnect rpc)
  set(core base checks decode reconnect)
  set(offenders "")
  foreach(room base checks decode reconnect rpc stream)
    set(allowed "client/${room}/")
    foreach(below ${below_${room}})
      list(APPEND allowed "client/${below}/")
    endforeach()
    if(room STREQUAL "base")
      list(APPEND allowed "common/util/")
    else()
      list(APPEND allowed "common/" "proto/" "shardcast/")
    endif()
    file(GLOB files ${PROJECT_SOURCE_DIR}/client/${room}/*.h
         ${PROJECT_SOURCE_DIR}/client/${room}/*.cc)
    foreach(file ${files})
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
      shardcast_includes_of(${file} paths)
      foreach(path ${paths})
        if(room IN_LIST core AND path MATCHES "\\.grpc\\.pb\\.h$")
          list(APPEND offenders "${rel} includes ${path} (gRPC, in a core room)")
          continue()
        endif()
        if(NOT path MATCHES "^(server|common|client|proto|tools|shardcast)/")
          continue()
        endif()
        set(ok FALSE)
        foreach(prefix ${allowed})
          string(FIND "${path}" "${prefix}" at)
          if(at EQUAL 0)
            set(ok TRUE)
            break()
          endif()
        endforeach()
        if(NOT ok)
          list(APPEND offenders "${rel} includes ${path}")
        endif()
      endforeach()
      if(room IN_LIST core)
        file(STRINGS ${file} grpc_includes REGEX "^#include <grpc")
        foreach(line ${grpc_includes})
          list(APPEND offenders "${rel}: ${line} (gRPC, in a core room)")
        endforeach()
      endif()
    endforeach()
    shardcast_check_folder_pairs(client/${room} offenders)
  endforeach()

  get_property(rooms GLOBAL PROPERTY SHARDCAST_CLIENT_CORE_ROOMS)
  if(NOT rooms)
    message(FATAL_ERROR "no core rooms registered: client/CMakeLists.txt's "
                        "shardcast_client_room(... CORE ...) should have named them")
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

  if(offenders)
    list(JOIN offenders "\n  " listed)
    message(FATAL_ERROR "An include or a link breaks the client's rooms (docs/design.md):\n"
      "  ${listed}\n(cmake/ClientRooms.cmake says the rules). client/base includes only "
      "common/util; a room includes only the rooms below it; two files never include each "
      "other; base, checks, decode and reconnect see and link no gRPC (client/rpc/ "
      "converts a call's grpc::Status with FromGrpc).")
  endif()
endfunction()

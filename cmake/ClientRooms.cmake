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
include(${CMAKE_CURRENT_LIST_DIR}/ServerCoreWithoutGrpc.cmake)

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
    shardcast_check_room_includes(client ${room} "${below_${room}}" offenders)
    shardcast_check_folder_pairs(client/${room} offenders)
    if(NOT room IN_LIST core)
      continue()
    endif()
    file(GLOB files ${PROJECT_SOURCE_DIR}/client/${room}/*.h ${PROJECT_SOURCE_DIR}/client/${room}/*.cc)
    foreach(file ${files})
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
      file(STRINGS ${file} grpc_includes REGEX "^#include (<grpc|\"[^\"]*\\.grpc\\.pb\\.h\")")
      foreach(line ${grpc_includes})
        list(APPEND offenders "${rel}: ${line} (gRPC, in a core room)")
      endforeach()
    endforeach()
  endforeach()
  shardcast_core_rooms_linking_grpc(SHARDCAST_CLIENT_CORE_ROOMS offenders)

  if(offenders)
    list(JOIN offenders "\n  " listed)
    message(FATAL_ERROR "An include or a link breaks the client's rooms (docs/design.md):\n"
      "  ${listed}\n(cmake/ClientRooms.cmake says the rules). client/base includes only "
      "common/util; a room includes only the rooms below it; two files never include each "
      "other; base, checks, decode and reconnect see and link no gRPC (client/rpc/ "
      "converts a call's grpc::Status with FromGrpc).")
  endif()
endfunction()

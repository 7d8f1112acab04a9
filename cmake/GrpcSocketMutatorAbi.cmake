# The gRPC version guard of server/grpc_socket_mutator_abi.h.
#
# That header declares gRPC-internal types (the socket mutator and its vtable) that no
# installed gRPC header declares, so a gRPC with another layout would compile and link
# and then call through the wrong vtable slot, or never count an accept: in production,
# the listener probe would find every listener dead. The header allows only the gRPC
# releases it was verified against (its SHARDCAST_GRPC_ABI_MIN_MINOR/MAX_MINOR, read
# here so the range is written once); this fails the configure step for any other
# found gRPC, before anything compiles. What to check to add a release: the header's
# comment.
#
# -DSHARDCAST_GRPC_ABI_UNCHECKED=ON lets a developer try another gRPC on purpose: the
# configure step warns loudly, the header's #error is off, and the server logs a
# warning at start; accept_watch_test then says whether the mutator works there.
option(SHARDCAST_GRPC_ABI_UNCHECKED
       "Build against a gRPC outside the range server/rpc/grpc_socket_mutator_abi.h was verified against"
       OFF)

# Beside this file, not under PROJECT_SOURCE_DIR: accept_watch_test runs the guard in a
# scratch project of its own.
set(_SHARDCAST_GRPC_ABI_HEADER "${CMAKE_CURRENT_LIST_DIR}/../server/rpc/grpc_socket_mutator_abi.h")

function(shardcast_check_grpc_socket_mutator_abi)
  set(header "${_SHARDCAST_GRPC_ABI_HEADER}")
  file(STRINGS "${header}" range REGEX "^#define SHARDCAST_GRPC_ABI_(MIN|MAX)_MINOR [0-9]+$")
  string(REGEX MATCH "MIN_MINOR ([0-9]+)" _ "${range}")
  set(min_minor "${CMAKE_MATCH_1}")
  string(REGEX MATCH "MAX_MINOR ([0-9]+)" _ "${range}")
  set(max_minor "${CMAKE_MATCH_1}")
  if(min_minor STREQUAL "" OR max_minor STREQUAL "")
    message(FATAL_ERROR "${header}: no SHARDCAST_GRPC_ABI_MIN_MINOR/MAX_MINOR defines")
  endif()
  if(min_minor STREQUAL max_minor)
    set(verified "gRPC 1.${min_minor}.x")
  else()
    set(verified "gRPC 1.${min_minor}.x to 1.${max_minor}.x")
  endif()
  if(NOT gRPC_VERSION)
    set(found "a gRPC of unknown version (its CMake package set no gRPC_VERSION)")
    set(inside FALSE)
  else()
    set(found "gRPC ${gRPC_VERSION}")
    math(EXPR after_max "${max_minor} + 1")
    if(gRPC_VERSION VERSION_GREATER_EQUAL "1.${min_minor}" AND
       gRPC_VERSION VERSION_LESS "1.${after_max}")
      set(inside TRUE)
    else()
      set(inside FALSE)
    endif()
  endif()
  if(inside)
    message(STATUS "gRPC ${gRPC_VERSION}: inside the socket mutator layout's verified range "
                   "(${verified})")
    return()
  endif()
  string(CONCAT what "server/rpc/grpc_socket_mutator_abi.h mirrors gRPC's internal socket "
                     "mutator layout and was verified against ${verified}, but this is "
                     "${found} (${gRPC_DIR}).")
  if(NOT SHARDCAST_GRPC_ABI_UNCHECKED)
    message(FATAL_ERROR "${what} Build against a verified gRPC, or check this one as the "
                        "header's comment says and widen its range. To try it anyway, "
                        "configure with -DSHARDCAST_GRPC_ABI_UNCHECKED=ON.")
  endif()
  message(WARNING "SHARDCAST_GRPC_ABI_UNCHECKED=ON, UNVERIFIED gRPC: ${what} Connection "
                  "limits (--max-connections) and the listener probe may not work, and the "
                  "server may crash in gRPC's listener or refuse to start (its listener "
                  "self-check). Run accept_watch_test and host_faults_test before trusting "
                  "this build; never ship it so.")
  add_compile_definitions(SHARDCAST_GRPC_ABI_UNCHECKED)
endfunction()

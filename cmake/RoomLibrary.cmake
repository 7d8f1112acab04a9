# shardcast_room_library(name SIDE side CORE? SOURCES ... PUBLIC ... PRIVATE ...): one
# room's library, for server/ and client/ (their CMakeLists.txt wrap it). A CORE room
# compiles with `side`/base/no_grpc.h forced in first, which poisons identifiers gRPC's
# headers use: an #include of a gRPC header there, directly or through another header,
# fails the build at that include, naming the chain. Its name joins the global property
# SHARDCAST_<SIDE>_CORE_ROOMS, whose link closures cmake/ServerCoreWithoutGrpc.cmake
# checks.
include_guard(GLOBAL)

function(shardcast_room_library name)
  cmake_parse_arguments(ARG "CORE" "SIDE" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC} PRIVATE shardcast_warnings ${ARG_PRIVATE})
  if(ARG_CORE)
    target_compile_options(${name} PRIVATE
      "SHELL:-include ${PROJECT_SOURCE_DIR}/${ARG_SIDE}/base/no_grpc.h")
    string(TOUPPER ${ARG_SIDE} side)
    set_property(GLOBAL APPEND PROPERTY SHARDCAST_${side}_CORE_ROOMS ${name})
  endif()
endfunction()

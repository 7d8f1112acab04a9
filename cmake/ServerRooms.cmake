# The server's rooms include only what is below them (docs/design.md's map), checked at
# configure time over the rooms' sources, so that a stray #include fails the configure
# step naming the file and the include rather than waiting for a reader of the map:
#
# - server/base, the ground floor, includes only itself and common/util (not the
#   remote, plan or shards libraries, not the wire messages);
# - every other room includes only itself, the rooms below it and common/, proto/ and
#   the generated messages;
# - no two files of one folder include each other's headers (a cycle of two ideas,
#   as stream_table and job_registry were), in the rooms and in common/'s util, image,
#   memory, plan, flags, remote and shards.
# The client's rooms are checked the same way by cmake/ClientRooms.cmake.
#
# It reads `#include "..."` lines, as written: an include the preprocessor never takes
# (under #if) counts too.

include_guard(GLOBAL)

function(shardcast_includes_of file out_var)
  file(STRINGS ${file} lines REGEX "^#include \"[^\"]+\"")
  set(paths "")
  foreach(line ${lines})
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" path "${line}")
    list(APPEND paths ${path})
  endforeach()
  set(${out_var} ${paths} PARENT_SCOPE)
endfunction()

# Appends to `offenders_var` every pair of files in `folder` (relative to the project,
# e.g. server/serving) whose stems include each other's headers.
function(shardcast_check_folder_pairs folder offenders_var)
  set(offenders ${${offenders_var}})
  file(GLOB files ${PROJECT_SOURCE_DIR}/${folder}/*.h ${PROJECT_SOURCE_DIR}/${folder}/*.cc)
  set(stems "")
  foreach(file ${files})
    get_filename_component(stem ${file} NAME_WE)
    list(APPEND stems ${stem})
    shardcast_includes_of(${file} paths)
    foreach(path ${paths})
      get_filename_component(dir ${path} DIRECTORY)
      get_filename_component(other ${path} NAME_WE)
      if(dir STREQUAL folder AND NOT other STREQUAL stem)
        list(APPEND uses_${stem} ${other})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES stems)
  foreach(stem ${stems})
    foreach(other ${uses_${stem}})
      if(stem STRLESS other AND stem IN_LIST uses_${other})
        list(APPEND offenders "${folder}: ${stem} and ${other} include each other")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES offenders)
  set(${offenders_var} ${offenders} PARENT_SCOPE)
endfunction()

# Appends to `offenders_var` every `#include "..."` of `side`/`room` (e.g. server, rpc)
# that names none of the room itself, the rooms in `rooms_below`, and what lies under
# every room: common/util/ alone for a side's ground floor (`base`), else common/,
# proto/ and the generated messages. Only the project's own headers (and the generated
# messages) have a floor.
function(shardcast_check_room_includes side room rooms_below offenders_var)
  set(offenders ${${offenders_var}})
  set(allowed "${side}/${room}/")
  foreach(below ${rooms_below})
    list(APPEND allowed "${side}/${below}/")
  endforeach()
  if(room STREQUAL "base")
    list(APPEND allowed "common/util/")
  else()
    list(APPEND allowed "common/" "proto/" "shardcast/")
  endif()
  file(GLOB files ${PROJECT_SOURCE_DIR}/${side}/${room}/*.h ${PROJECT_SOURCE_DIR}/${side}/${room}/*.cc)
  foreach(file ${files})
    shardcast_includes_of(${file} paths)
    foreach(path ${paths})
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
        file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
        list(APPEND offenders "${rel} includes ${path}")
      endif()
    endforeach()
  endforeach()
  set(${offenders_var} ${offenders} PARENT_SCOPE)
endfunction()

function(shardcast_check_server_rooms)
  set(below_base "")
  set(below_net base)
  set(below_assembly base)
  set(below_status base net)
  set(below_serving base net assembly status)
  set(below_rpc base net assembly status serving)
  set(offenders "")
  foreach(room base net assembly status serving rpc)
    shardcast_check_room_includes(server ${room} "${below_${room}}" offenders)
    shardcast_check_folder_pairs(server/${room} offenders)
  endforeach()
  foreach(folder util image memory plan flags remote shards)
    shardcast_check_folder_pairs(common/${folder} offenders)
  endforeach()
  if(offenders)
    list(JOIN offenders "\n  " listed)
    message(FATAL_ERROR "An include breaks the map of rooms (docs/design.md):\n  ${listed}\n"
      "(cmake/ServerRooms.cmake says the rules). server/base includes only common/util; a "
      "room includes only the rooms below it; two files never include each other.")
  endif()
endfunction()

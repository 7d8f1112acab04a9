# The targets a target depends on, as chains, for the configure-time checks of the
# build's rules (TorchProtobufSeparation.cmake, ServerCoreWithoutGrpc.cmake,
# ClientRooms.cmake).
#
# shardcast_link_closure(TARGET OUT_VAR [HEADERS_ONLY]): sets OUT_VAR to every target
# reachable from TARGET through its link libraries (its own LINK_LIBRARIES, then
# INTERFACE_LINK_LIBRARIES transitively), each as a "dep<-parent<-...<-TARGET" chain,
# once. HEADERS_ONLY skips $<LINK_ONLY:...> entries: they link but carry no headers.
#
# Included by both checks, so guarded (CMake keeps a redefined command as `_NAME`, which
# would shadow a helper of that name).
include_guard(GLOBAL)

function(shardcast_link_closure_walk target chain headers_only visited_var out_var)
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
        if(headers_only)
          continue()
        endif()
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
      shardcast_link_closure_walk(${dep} "${dep}<-${chain}" ${headers_only} visited out)
    endforeach()
  endforeach()
  set(${visited_var} ${visited} PARENT_SCOPE)
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()

function(shardcast_link_closure target out_var)
  set(headers_only FALSE)
  if("HEADERS_ONLY" IN_LIST ARGN)
    set(headers_only TRUE)
  endif()
  set(visited ${target})
  set(out "")
  shardcast_link_closure_walk(${target} ${target} ${headers_only} visited out)
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()

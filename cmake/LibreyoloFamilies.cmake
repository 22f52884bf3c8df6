# The registered families, read from include/libreyolo/families/list.hpp (one `LIBREYOLO_FAMILY(<folder>,
# <Type>)` line each): sets <out_folders> and <out_types> (parallel lists) in the caller's scope and makes
# the list file a configure dependency, so adding a line re-runs CMake. Used by tools/ (one translation
# unit of trainer instantiations per family) and tests/ (one conformance translation unit per family).
function(libreyolo_family_list out_folders out_types)
  set(_list ${PROJECT_SOURCE_DIR}/include/libreyolo/families/list.hpp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_list})
  file(READ ${_list} _text)
  string(REGEX MATCHALL "LIBREYOLO_FAMILY\\([A-Za-z0-9_]+, *[A-Za-z0-9_]+\\)" _lines "${_text}")
  if(NOT _lines)
    message(FATAL_ERROR "${_list}: no LIBREYOLO_FAMILY(<folder>, <Type>) line found")
  endif()
  set(_folders)
  set(_types)
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE "LIBREYOLO_FAMILY\\(([A-Za-z0-9_]+), *([A-Za-z0-9_]+)\\)" "\\1;\\2" _pair "${_line}")
    list(GET _pair 0 _folder)
    list(GET _pair 1 _type)
    list(APPEND _folders ${_folder})
    list(APPEND _types ${_type})
  endforeach()
  set(${out_folders} ${_folders} PARENT_SCOPE)
  set(${out_types} ${_types} PARENT_SCOPE)
endfunction()

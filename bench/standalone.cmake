# Included by every bench/<folder>/CMakeLists.txt right after its project() call (CMake wants
# project() literally in a top-level file; in a sub-directory it only names the folder's project).
# It defines ttmoe_bench_program (program.cmake), so a folder only lists its programs. When the folder
# is configured on its own (cmake -S bench/<folder> -B build-..., as its run script does), it also
# makes the build Release by default and pulls in the library from the repository root with its
# tests, examples and packaging tests off.
if(CMAKE_SOURCE_DIR STREQUAL CMAKE_CURRENT_SOURCE_DIR)
  if(NOT CMAKE_BUILD_TYPE)
    set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
  endif()
  set(TTMOE_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(TTMOE_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
  set(TTMOE_PACKAGING_TESTS OFF CACHE BOOL "" FORCE)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/.. ttmoe)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/program.cmake)

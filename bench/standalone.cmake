# Lets a bench/<folder> be configured on its own (cmake -S bench/<folder> -B build-...), as its run
# script does: Release by default, and the library pulled in from the repository root with its tests,
# examples and packaging tests off. Include it right after the folder's own project() call, which
# runs only stand-alone (CMake wants project() literally in the top-level file).
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
set(TTMOE_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(TTMOE_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
set(TTMOE_PACKAGING_TESTS OFF CACHE BOOL "" FORCE)
add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/.. ttmoe)

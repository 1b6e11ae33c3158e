# Finds ttmoe's dependencies. Used by the build tree and by the installed ttmoeConfig.cmake,
# so a consumer resolves exactly what the library was built against.
include(CMakeFindDependencyMacro)
if(NOT COMMAND ttmoe_find_dependency)
  macro(ttmoe_find_dependency)
    if(CMAKE_FIND_PACKAGE_NAME STREQUAL "ttmoe")
      find_dependency(${ARGN})
    else()
      find_package(${ARGN} REQUIRED)
    endif()
  endmacro()
endif()

ttmoe_find_dependency(Eigen3 3.4 CONFIG)
ttmoe_find_dependency(xsimd CONFIG)
ttmoe_find_dependency(fmt CONFIG)
ttmoe_find_dependency(nlohmann_json 3 CONFIG)   # safetensors / checkpoint headers (header-only)
set(THREADS_PREFER_PTHREAD_FLAG ON)
ttmoe_find_dependency(Threads)

# Debian's xsimd target links a library called `xtl` that may not be installed. xsimd 8's
# headers do not need it, so drop the link when no `xtl` target exists.
if(TARGET xsimd AND NOT TARGET xtl)
  set_target_properties(xsimd PROPERTIES INTERFACE_LINK_LIBRARIES "")
endif()

# ttmoe_bench_program(name source [libraries...]): one benchmark executable, the same way in every
# bench folder: linked to ttmoe::ttmoe plus `libraries`, -O3 whatever the build type, and the
# project's warnings where that target exists (it is not exported, so an installed-package build has
# none). bench/CMakeLists.txt includes this before adding the folders, standalone.cmake when a folder
# is configured on its own, so a folder's CMakeLists.txt only lists its programs.
include_guard(GLOBAL)

function(ttmoe_bench_program name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ttmoe::ttmoe ${ARGN})
  target_compile_options(${name} PRIVATE -O3)
  if(TARGET ttmoe_project_warnings)
    target_link_libraries(${name} PRIVATE ttmoe_project_warnings)
  endif()
endfunction()

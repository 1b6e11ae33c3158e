# Compiles one snippet with -fsyntax-only and checks the outcome (run by CTest through cmake -P).
#   -DCXX=<compiler> -DFLAGS=<response file> -DSOURCE=<snippet>
#   -DEXPECT=success                 the snippet must compile
#   -DEXPECT=<regex>                 it must FAIL to compile and the diagnostics must match <regex>
foreach(v CXX FLAGS SOURCE EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_compile.cmake: -D${v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${CXX} @${FLAGS} -fsyntax-only ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(diag "${out}${err}")
if(EXPECT STREQUAL "success")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "control snippet ${SOURCE} failed to compile (rc ${rc}):\n${diag}")
  endif()
  message(STATUS "compiled as expected: ${SOURCE}")
else()
  if(rc EQUAL 0)
    message(FATAL_ERROR "snippet ${SOURCE} compiled, but a static shape clash must be a compile error")
  endif()
  foreach(re IN LISTS EXPECT)
    if(NOT diag MATCHES "${re}")
      string(SUBSTRING "${diag}" 0 4000 head)
      message(FATAL_ERROR "snippet ${SOURCE} failed to compile, but the diagnostics do not match '${re}':\n${head}")
    endif()
  endforeach()
  message(STATUS "rejected as expected (matched ${EXPECT}): ${SOURCE}")
endif()

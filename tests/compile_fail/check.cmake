# Compiles api_misuse.cc with -DCASE=<CASE> (syntax only) and checks the
# outcome: CASE 0 must compile; any other must fail with a diagnostic that
# matches EXPECT, so that it fails for the reason it is meant to.
#
#   cmake -DCXX=<compiler> -DSOURCE_DIR=<repo> -DBINARY_DIR=<build> -DCASE=<n>
#         [-DEXPECT=<regex>] -P check.cmake
cmake_minimum_required(VERSION 3.25)

execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -I${SOURCE_DIR} -I${BINARY_DIR}/gen -DCASE=${CASE}
          ${CMAKE_CURRENT_LIST_DIR}/api_misuse.cc
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(CASE EQUAL 0)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compile-fail: the correct use (CASE 0) does not compile:\n${out}")
  endif()
  message(STATUS "compile-fail: CASE 0 compiles")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "compile-fail: CASE ${CASE} compiled, but it must not")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "compile-fail: CASE ${CASE} failed, but not with /${EXPECT}/:\n${out}")
endif()
message(STATUS "compile-fail: CASE ${CASE} fails as it should (/${EXPECT}/)")

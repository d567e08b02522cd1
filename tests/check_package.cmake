# The install and the CMake package of troupe, checked end to end:
#  1. installs the build tree BUILD to a scratch prefix (cmake --install);
#  2. checks that the installed libraries find their dependencies ($ORIGIN),
#     and that the installed bin/troupe runs without LD_LIBRARY_PATH;
#  3. configures and builds examples/user_actors as a project of its own
#     against that prefix (find_package(troupe) through CMAKE_PREFIX_PATH);
#  4. builds tests/package_consumer against the prefix too and runs it: it
#     loads the library of step 3 with load_actor_library;
#  5. builds examples/parameter_server and examples/collective_recovery
#     against the prefix and runs each on a local cluster of the installed
#     troupe.
# Skips (prints "troupe-package-check: SKIPPED") when BUILD has no install
# rules for troupe. WORK is removed first, and again when every step passed.
#
#   cmake -DBUILD=<build dir> -DSOURCE=<repo> -DWORK=<scratch dir>
#         [-DGENERATOR=Ninja -DMAKE_PROGRAM=... -DCC=... -DCXX=... -DLAUNCHER=ccache
#          -DFLAGS=<extra compile and link flags>] -P check_package.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD SOURCE WORK)
  if(NOT ${var})
    message(FATAL_ERROR "troupe-package-check: -D${var}=... is required")
  endif()
endforeach()

set(rules "")
if(EXISTS "${BUILD}/cmake_install.cmake")
  file(READ "${BUILD}/cmake_install.cmake" rules)
endif()
if(NOT rules MATCHES "troupeTargets")
  message("troupe-package-check: SKIPPED: ${BUILD} has no install rules for troupe "
          "(they need the shared libraries: BUILD_SHARED_LIBS=ON)")
  return()
endif()

file(REMOVE_RECURSE "${WORK}")
set(prefix "${WORK}/prefix")

# Runs a step; fails with its output if it fails.
function(step name)
  message(STATUS "troupe-package-check: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "troupe-package-check: ${name} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("install ${BUILD} to ${prefix}" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})

foreach(file lib/cmake/troupe/troupeConfig.cmake lib/cmake/troupe/troupeConfigVersion.cmake
             include/troupe/core/actor.h include/troupe/transport/buffer.h
             include/troupe/transport/schema/handshake.capnp.h)
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "troupe-package-check: the install lacks ${file}")
  endif()
endforeach()

# Each installed library finds the others beside it, and the system's.
file(GLOB libraries "${prefix}/lib/libtroupe_*.so")
file(GET_RUNTIME_DEPENDENCIES LIBRARIES ${libraries}
     RESOLVED_DEPENDENCIES_VAR resolved UNRESOLVED_DEPENDENCIES_VAR unresolved)
if(unresolved)
  message(FATAL_ERROR "troupe-package-check: installed libraries with unresolved dependencies: "
                      "${unresolved}")
endif()
foreach(dependency IN LISTS resolved)
  get_filename_component(name "${dependency}" NAME)
  string(FIND "${dependency}" "${prefix}/" at)
  if(name MATCHES "^libtroupe_" AND NOT at EQUAL 0)
    message(FATAL_ERROR "troupe-package-check: an installed library loads ${dependency}, "
                        "not the copy in ${prefix}/lib")
  endif()
endforeach()

# The installed troupe runs as installed: its RUNPATH finds ../lib, with no
# LD_LIBRARY_PATH.
if(NOT EXISTS "${prefix}/bin/troupe")
  message(FATAL_ERROR "troupe-package-check: the install lacks bin/troupe")
endif()
step("run the installed troupe" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
     ${prefix}/bin/troupe --version)
if(NOT step_output MATCHES "troupe ")
  message(FATAL_ERROR "troupe-package-check: `troupe --version` printed:\n${step_output}")
endif()

set(configure_args -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}")
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
foreach(pair "MAKE_PROGRAM;CMAKE_MAKE_PROGRAM" "CC;CMAKE_C_COMPILER" "CXX;CMAKE_CXX_COMPILER"
             "LAUNCHER;CMAKE_CXX_COMPILER_LAUNCHER")
  list(GET pair 0 from)
  list(GET pair 1 to)
  if(${from})
    list(APPEND configure_args "-D${to}=${${from}}")
  endif()
endforeach()
if(FLAGS)
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=${FLAGS}" "-DCMAKE_SHARED_LINKER_FLAGS=${FLAGS}"
       "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS}")
endif()

# Builds the project in `source` into `build` against the prefix.
function(build_against_prefix source build)
  step("configure ${source}" ${CMAKE_COMMAND} -S ${source} -B ${build} ${configure_args})
  file(STRINGS "${build}/CMakeCache.txt" found REGEX "^troupe_DIR:")
  string(FIND "${found}" "=${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "troupe-package-check: ${source} found troupe elsewhere: ${found}")
  endif()
  step("build ${source}" ${CMAKE_COMMAND} --build ${build})
endfunction()

build_against_prefix(${SOURCE}/examples/user_actors ${WORK}/user_actors)
set(library "${WORK}/user_actors/libuser_actors.so")
if(NOT EXISTS "${library}")
  message(FATAL_ERROR "troupe-package-check: building examples/user_actors made no ${library}")
endif()

build_against_prefix(${SOURCE}/tests/package_consumer ${WORK}/consumer)
step("load ${library}" ${WORK}/consumer/load_actor_library ${library} ${WORK}/user_actors)
if(NOT step_output MATCHES "registered KeyValueShard")
  message(FATAL_ERROR "troupe-package-check: loading ${library} did not register KeyValueShard:\n"
                      "${step_output}")
endif()

# The parameter-server example, built against the install and run on a
# cluster of the installed troupe (head and workers from ${prefix}/bin).
foreach(example "parameter_server;ps_actors;ps_driver;3;CPU=2;done: loss"
                "collective_recovery;group_actors;group_driver;4;CPU=1;after re-forming")
  list(GET example 0 name)
  list(GET example 1 library)
  list(GET example 2 driver)
  list(GET example 3 workers)
  list(GET example 4 resources)
  list(GET example 5 expect)
  build_against_prefix(${SOURCE}/examples/${name} ${WORK}/${name})
  step("run examples/${name} on the installed troupe" ${CMAKE_COMMAND} -E env
       --unset=LD_LIBRARY_PATH ${SOURCE}/examples/run_local_cluster.sh ${prefix}/bin/troupe
       ${WORK}/${name}/lib${library}.so ${workers} ${resources} ${WORK}/${name}/${driver})
  if(NOT step_output MATCHES "${expect}")
    message(FATAL_ERROR "troupe-package-check: examples/${name} did not finish:\n"
                        "${step_output}")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK}")
message(STATUS "troupe-package-check: ok (installed, ran the installed troupe, built "
               "examples/user_actors, parameter_server and collective_recovery against the "
               "install, loaded the first, ran the others on a cluster of the installed troupe)")

# Install rules and the CMake package of troupe, for users who build actor
# libraries of their own against an installed troupe (docs/cluster.md):
#
#   find_package(troupe REQUIRED)
#   add_library(my_actors SHARED my_actors.cc)
#   target_link_libraries(my_actors PRIVATE troupe::core)
#
# Layout under the install prefix:
#   include/troupe/{transport,nn,core}/**.h  the headers, included as in-tree: "core/actor.h"
#   include/troupe/**.capnp.h                the generated Cap'n Proto headers (gen/ in the build tree)
#   lib/libtroupe_{io,transport,nn,core,checkpoint,actors,trainers}.so*  the libraries; each finds the others through $ORIGIN
#   lib/cmake/troupe/                        troupeConfig.cmake, its version file, the exported targets
#
# Included from the root CMakeLists.txt once the library targets exist.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The NCCL backend (transport/collectives/device_collectives.h) is loaded, not
# linked, as the CUDA backend is: building troupe builds it.
if(TARGET troupe_nccl AND TARGET troupe)
  add_dependencies(troupe troupe_nccl)
endif()

# The libraries users link, in link order: troupe_X is exported as troupe::X
# and its headers are the *.h files under X/ in the source tree (troupe_io's,
# core/io/*.h, go with core's).
set(TROUPE_EXPORTED_TARGETS troupe_io troupe_text troupe_transport troupe_nn troupe_core troupe_checkpoint
                            troupe_actors troupe_trainers)
set(TROUPE_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/troupe)
set(TROUPE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)

foreach(target IN LISTS TROUPE_EXPORTED_TARGETS)
  string(REPLACE "troupe_" "" name ${target})
  # The installed names work in-tree too (for a project that adds troupe as a subdirectory).
  add_library(troupe::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
endforeach()

# An actor library registers its types in libtroupe_core's registry, so there
# must be exactly one of it in the process: the package is shared libraries only.
foreach(target IN LISTS TROUPE_EXPORTED_TARGETS)
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "SHARED_LIBRARY")
    message(STATUS "troupe: no install rules: ${target} is a ${type} (configure with BUILD_SHARED_LIBS=ON)")
    return()
  endif()
endforeach()

foreach(target IN LISTS TROUPE_EXPORTED_TARGETS)
  # Include directories in the source and build trees hold for the build tree
  # only; installed, the headers are under include/troupe.
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  set(fixed "")
  foreach(dir IN LISTS dirs)
    string(FIND "${dir}" "${PROJECT_SOURCE_DIR}" in_source)
    string(FIND "${dir}" "${PROJECT_BINARY_DIR}" in_binary)
    if(in_source EQUAL 0 OR in_binary EQUAL 0)
      list(APPEND fixed "$<BUILD_INTERFACE:${dir}>")
    else()
      list(APPEND fixed "${dir}")
    endif()
  endforeach()
  list(APPEND fixed "$<INSTALL_INTERFACE:${TROUPE_INSTALL_INCLUDEDIR}>")
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${fixed}")

  # The soname carries major.minor: before 1.0 a minor release breaks the ABI.
  set_target_properties(${target} PROPERTIES
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
    INSTALL_RPATH "\$ORIGIN")

  string(REPLACE "troupe_" "" name ${target})
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/${name}/*.h)
  foreach(header IN LISTS headers)
    get_filename_component(dir ${header} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${TROUPE_INSTALL_INCLUDEDIR}/${dir}
            COMPONENT troupe_development)
  endforeach()
endforeach()

# The generated Cap'n Proto headers, under the paths the sources include them by.
install(DIRECTORY ${PROJECT_BINARY_DIR}/gen/ DESTINATION ${TROUPE_INSTALL_INCLUDEDIR}
        COMPONENT troupe_development FILES_MATCHING PATTERN "*.capnp.h")

install(TARGETS ${TROUPE_EXPORTED_TARGETS} EXPORT troupeTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT troupe_runtime
          NAMELINK_COMPONENT troupe_development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT troupe_development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT troupe_runtime)
install(EXPORT troupeTargets NAMESPACE troupe:: DESTINATION ${TROUPE_INSTALL_CMAKEDIR}
        COMPONENT troupe_development)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/troupeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/troupeConfig.cmake
  INSTALL_DESTINATION ${TROUPE_INSTALL_CMAKEDIR})
# An actor library must be built against the troupe its workers run; within
# a minor version the ABI holds (see SOVERSION above).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/troupeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/troupeConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/troupeConfigVersion.cmake
        DESTINATION ${TROUPE_INSTALL_CMAKEDIR} COMPONENT troupe_development)

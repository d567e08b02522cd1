# find_package(CUDAToolkit) that configures on Debian 12's own CMake (3.25.1) with CUDA 13.
# That CMake's FindCUDAToolkit, in a project requiring CMake >= 3.25, marks CUDA::nvToolsExt
# deprecated without checking that the target exists; CUDA 13 has no nvToolsExt, so the
# configure fails ("set_property could not find TARGET CUDA::nvToolsExt"). troupe uses no
# nvToolsExt: the module is run as a 3.24 project's, which skips that branch (later CMakes check
# the target themselves).
macro(troupe_find_cuda_toolkit)
  set(_troupe_minimum_required ${CMAKE_MINIMUM_REQUIRED_VERSION})
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit ${ARGN})
  set(CMAKE_MINIMUM_REQUIRED_VERSION ${_troupe_minimum_required})
  unset(_troupe_minimum_required)
endmacro()

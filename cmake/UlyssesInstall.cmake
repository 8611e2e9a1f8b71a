# `cmake --install`: the program, the public API's header and static libraries, and the
# CMake package that gives find_package(ulysses_ipc) -> ulysses_ipc::ulysses_ipc (the
# libraries it is made of come along as ulysses_ipc::comm (an interface over ::transport,
# ::collectives, ::bootstrap, ::device), ::model, ::trace, ::base and, in a CUDA build,
# ::cuda_device and ::nccl). docs/library.md lists the tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_ulysses_export ulysses_ipc ulysses_comm ulysses_transport ulysses_collectives ulysses_bootstrap ulysses_device
                     ulysses_model ulysses_trace ulysses_base ulysses_flags)
if(ULYSSES_HAVE_CUDA)
  list(APPEND _ulysses_export ulysses_cuda_device ulysses_nccl)
endif()
foreach(_t IN LISTS _ulysses_export)
  string(REGEX REPLACE "^ulysses_" "" _name ${_t})
  if(_t STREQUAL "ulysses_ipc")
    set(_name ulysses_ipc)
  endif()
  set_target_properties(${_t} PROPERTIES EXPORT_NAME ${_name})
endforeach()

install(TARGETS ${_ulysses_export} EXPORT ulysses_ipc_targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ulysses_ipc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_ulysses_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/ulysses_ipc)
install(EXPORT ulysses_ipc_targets NAMESPACE ulysses_ipc:: FILE ulysses_ipcTargets.cmake
        DESTINATION ${_ulysses_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ulysses_ipcConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/ulysses_ipcConfig.cmake INSTALL_DESTINATION ${_ulysses_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ulysses_ipcConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ulysses_ipcConfig.cmake ${PROJECT_BINARY_DIR}/ulysses_ipcConfigVersion.cmake
        DESTINATION ${_ulysses_cmake_dir})

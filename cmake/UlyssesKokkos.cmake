# Provides the target ulysses::kokkos.
# A site's own Kokkos (Spack, modules: Kokkos_ROOT) is used as it is. Debian's Kokkos
# comes from Trilinos 13.2, whose KokkosConfig.cmake points its include directory at a
# missing <prefix>/include (the headers are in <prefix>/include/trilinos): that one
# quirk is mended here, and nowhere else.
find_package(Kokkos QUIET)
if(TARGET Kokkos::kokkos)
  find_path(ULYSSES_KOKKOS_INCLUDE Kokkos_Core.hpp
            HINTS ${Kokkos_INCLUDE_DIRS} ${Kokkos_ROOT}/include/trilinos ${Kokkos_ROOT}/include /usr/include/trilinos
            PATH_SUFFIXES trilinos)
endif()
if(NOT ULYSSES_KOKKOS_INCLUDE)
  message(FATAL_ERROR "Kokkos not found: install Debian's libtrilinos-kokkos-dev, or point Kokkos_ROOT at a Kokkos install")
endif()

get_target_property(_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
set(_kk_ok FALSE)
foreach(_d IN LISTS _kk_inc)
  if(EXISTS "${_d}/Kokkos_Core.hpp")
    set(_kk_ok TRUE)
  endif()
endforeach()

add_library(ulysses_kokkos INTERFACE)
if(_kk_ok)
  target_link_libraries(ulysses_kokkos INTERFACE Kokkos::kokkos)
else()
  # Debian/Trilinos: use the libraries by name, the headers from where they are. A
  # Kokkos_ROOT may point at such a tree unpacked elsewhere (dpkg -x of the .debs, as
  # scripts/gpu_check.sh does on a machine without Kokkos): search it first.
  set(_kk_lib_hints)
  if(Kokkos_ROOT)
    set(_kk_lib_hints HINTS ${Kokkos_ROOT}/lib/${CMAKE_LIBRARY_ARCHITECTURE} ${Kokkos_ROOT}/lib)
  endif()
  find_library(ULYSSES_KOKKOSCORE_LIB NAMES trilinos_kokkoscore kokkoscore ${_kk_lib_hints} REQUIRED)
  find_library(ULYSSES_KOKKOSCONTAINERS_LIB NAMES trilinos_kokkoscontainers kokkoscontainers ${_kk_lib_hints} REQUIRED)
  target_include_directories(ulysses_kokkos SYSTEM INTERFACE ${ULYSSES_KOKKOS_INCLUDE})
  target_link_libraries(ulysses_kokkos INTERFACE ${ULYSSES_KOKKOSCONTAINERS_LIB} ${ULYSSES_KOKKOSCORE_LIB} ${CMAKE_DL_LIBS})
endif()
add_library(ulysses::kokkos ALIAS ulysses_kokkos)
message(STATUS "Kokkos headers: ${ULYSSES_KOKKOS_INCLUDE} (Kokkos ${Kokkos_VERSION})")

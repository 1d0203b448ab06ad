# `cmake --install <build> --prefix <prefix>`: the C++ runtime and the C API as shared libraries,
# their headers, the command-line program, an orthojitConfig.cmake with the targets
# orthojit::runtime (C++) and orthojit::c (C), and orthojit.pc for the C API
# (examples/cmake_consumer builds against such a prefix; tests/install_consumer_test.sh in
# `make test`).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# liborthojit.so: the C++ runtime with its lower layers (compiler, kernels, autotune) linked in
# whole, so a consumer links one library. Only orthojit:: symbols are exported
# (runtime/orthojit_cpp.map): the static parts' other symbols stay private.
add_library(orthojit_runtime_shared SHARED ${CMAKE_SOURCE_DIR}/runtime/package_version.cpp)
target_link_libraries(orthojit_runtime_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,orthojit_runtime>" orthojit_warnings)
target_compile_definitions(orthojit_runtime_shared PRIVATE ORTHOJIT_VERSION="${PROJECT_VERSION}")
target_include_directories(orthojit_runtime_shared PUBLIC
  "$<BUILD_INTERFACE:${CMAKE_SOURCE_DIR};${CMAKE_SOURCE_DIR}/compiler>"
  "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/orthojit;${CMAKE_INSTALL_INCLUDEDIR}/orthojit/compiler>")
target_compile_features(orthojit_runtime_shared INTERFACE cxx_std_20)
target_link_options(orthojit_runtime_shared PRIVATE -Wl,--version-script=${CMAKE_SOURCE_DIR}/runtime/orthojit_cpp.map -Wl,--no-undefined)
set_target_properties(orthojit_runtime_shared PROPERTIES OUTPUT_NAME orthojit EXPORT_NAME runtime VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR} LINK_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/orthojit_cpp.map)
set_target_properties(orthojit_c PROPERTIES EXPORT_NAME c)
# A sanitizer build's libraries need their sanitizer's runtime loaded first in the program (ASan
# refuses to start otherwise), so a consumer links it: the exported targets and the .pc file say
# so (make test-sanitize runs install_consumer_test against such a prefix).
set(pc_sanitize_libs "")
if(ORTHOJIT_SANITIZE)
  target_link_options(orthojit_runtime_shared INTERFACE -fsanitize=${ORTHOJIT_SANITIZE})
  target_link_options(orthojit_c INTERFACE -fsanitize=${ORTHOJIT_SANITIZE})
  set(pc_sanitize_libs " -fsanitize=${ORTHOJIT_SANITIZE}")
endif()

install(TARGETS orthojit_runtime_shared orthojit_c EXPORT orthojitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS orthojit RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/orthojit/orthojit.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/orthojit)
# The C++ API's headers keep their paths (runtime/..., kernels/..., and compiler/{dsl,ir,support}
# for the types they use), so the same #include lines work in the tree and installed.
# runtime/records.h is left out: the CLI's and the bindings' JSON records, not a C++ API, and it
# includes autotune/ headers the package does not ship.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/runtime/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/orthojit/runtime FILES_MATCHING PATTERN "*.h"
        PATTERN "records.h" EXCLUDE)
install(FILES ${CMAKE_SOURCE_DIR}/kernels/program_library.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/orthojit/kernels)
foreach(part dsl ir support)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/compiler/${part}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/orthojit/compiler/${part} FILES_MATCHING PATTERN "*.h")
endforeach()

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/orthojit)
install(EXPORT orthojitTargets NAMESPACE orthojit:: DESTINATION ${config_dir} FILE orthojitTargets.cmake)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/orthojitConfig.cmake.in ${CMAKE_BINARY_DIR}/package/orthojitConfig.cmake
  INSTALL_DESTINATION ${config_dir})
# 0.x: a minor version may change the C++ API; the C API's rules are in orthojit.h.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/orthojitConfigVersion.cmake VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/orthojitConfig.cmake ${CMAKE_BINARY_DIR}/package/orthojitConfigVersion.cmake DESTINATION ${config_dir})
# The .pc file finds its prefix from its own place (pkg-config's pcfiledir), so an install moved
# with `--prefix` at install time still works.
file(RELATIVE_PATH pc_prefix_relative /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${CMAKE_SOURCE_DIR}/cmake/orthojit.pc.in ${CMAKE_BINARY_DIR}/package/orthojit.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/orthojit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(ORTHOJIT_BUILD_TESTS)
  add_test(NAME install_consumer_test COMMAND sh ${CMAKE_SOURCE_DIR}/tests/install_consumer_test.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                                              ${CMAKE_BINARY_DIR}/install-consumer)
  set_tests_properties(install_consumer_test PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
endif()

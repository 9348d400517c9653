# What `cmake --install` puts where, and the Debian package (`cpack -G DEB`, run by
# deploy/deb.sh). Under the prefix (/usr for the .deb; CMAKE_INSTALL_PREFIX):
#
#   bin/                     gpukitd, gpukitctl, gpukit-device-plugin
#   libexec/gpukit/          gpukit-executor, gpukit-compile-worker (gpukitd looks for them
#                            beside itself, then in ../libexec/gpukit)
#   lib/<multiarch>/         libgpukit.so.* (the C++ client) and pkgconfig/gpukit.pc
#   include/gpukit/          client.h, and runtime/base/dtype.h, which it includes
#   lib/systemd/system/      gpukitd.service (deploy/gpukitd.service with its /usr/local/
#                            paths made the prefix's)
#   lib/sysusers.d/          gpukit.conf (deploy/gpukit.sysusers.conf: the service user)
#   share/doc/gpukit/        the operator's documentation
#   /etc/gpukit/gpukitd.json the example configuration (etc/gpukit/ under any other prefix);
#                            the .deb marks it a conffile
#
# The version of everything (the .deb, gpukitd --version, the Status RPC, libgpukit's
# soname, the Python package) is the project's: project(gpukit VERSION ...) at the top.
include(GNUInstallDirs)

# The systemd unit and sysusers.d folders below the prefix: systemd reads both /usr/lib/...
# and /usr/local/lib/... (not the multiarch libdir).
set(GPUKIT_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where gpukitd.service is installed (relative: below the prefix)")
set(GPUKIT_SYSUSERS_DIR "lib/sysusers.d" CACHE STRING
    "Where the sysusers.d entry of the service user is installed (relative: below the prefix)")
# /etc for the system prefix (/usr, as Debian's packages), else etc/ below the prefix.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(gpukit_sysconf_dir "/etc/gpukit")
else()
  set(gpukit_sysconf_dir "${CMAKE_INSTALL_SYSCONFDIR}/gpukit")
endif()

install(TARGETS gpukitd gpukitctl gpukit-device-plugin RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS gpukit-executor gpukit-compile-worker
        RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/gpukit)

# The C++ client.
install(TARGETS gpukit LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES client/cpp/include/gpukit/client.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpukit)
# client.h includes "runtime/base/dtype.h", which the compiler finds beside it.
install(FILES runtime/base/dtype.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpukit/runtime/base)
# gpukit.pc: paths relative to its own folder, so that it is right under any prefix.
file(RELATIVE_PATH gpukit_pc_to_prefix "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" gpukit_pc_to_prefix "${gpukit_pc_to_prefix}")
file(WRITE "${CMAKE_BINARY_DIR}/gpukit.pc"
"prefix=\${pcfiledir}/${gpukit_pc_to_prefix}
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}

Name: gpukit
Description: C++ client of gpukitd, the GPU runtime daemon
Version: ${PROJECT_VERSION}
Requires: absl_status absl_statusor absl_strings absl_time absl_span
Libs: -L\${libdir} -lgpukit
Cflags: -I\${includedir} -std=c++20
")
install(FILES "${CMAKE_BINARY_DIR}/gpukit.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The service: the unit with the prefix's paths (read at install time, so that the file in
# deploy/ is the only copy), the sysusers.d entry and the example configuration.
install(CODE "
  set(gpukit_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  string(REGEX REPLACE \"/$\" \"\" gpukit_prefix \"\${gpukit_prefix}\")
  set(gpukit_sysconf \"${gpukit_sysconf_dir}\")
  if(NOT IS_ABSOLUTE \"\${gpukit_sysconf}\")
    set(gpukit_sysconf \"\${gpukit_prefix}/\${gpukit_sysconf}\")
  endif()
  file(READ \"${PROJECT_SOURCE_DIR}/deploy/gpukitd.service\" gpukit_unit)
  string(REPLACE \"/etc/gpukit/\" \"@GPUKIT_SYSCONF@/\" gpukit_unit \"\${gpukit_unit}\")
  string(REPLACE \"/usr/local/\" \"\${gpukit_prefix}/\" gpukit_unit \"\${gpukit_unit}\")
  string(REPLACE \"@GPUKIT_SYSCONF@\" \"\${gpukit_sysconf}\" gpukit_unit \"\${gpukit_unit}\")
  file(WRITE \"${CMAKE_BINARY_DIR}/gpukitd.service\" \"\${gpukit_unit}\")
")
install(FILES "${CMAKE_BINARY_DIR}/gpukitd.service" DESTINATION ${GPUKIT_SYSTEMD_UNIT_DIR})
install(FILES deploy/gpukit.sysusers.conf DESTINATION ${GPUKIT_SYSUSERS_DIR} RENAME gpukit.conf)
install(FILES deploy/gpukitd.json DESTINATION ${gpukit_sysconf_dir})
install(FILES docs/operations.md docs/api.md docs/architecture.md docs/security.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---- The Debian package: gpukit_<version>_<arch>.deb ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gpukit)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "gpukit maintainers <gpukit@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU runtime daemon shared by many client processes")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
       "gpukitd shares GPUs among client processes over gRPC: sessions, partitions and QoS, "
       "with each device in a supervised executor process. The package holds gpukitd and its "
       "systemd unit, gpukitctl, the Kubernetes device plugin and libgpukit, the C++ client "
       "library, with its headers.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # gpukit_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: what dpkg-shlibdeps finds the ELF files need, not a hand-written list.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # a shlibs file for libgpukit
# What building a program against libgpukit needs beyond the package (gpukit.pc's Requires).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libabsl-dev, pkg-config")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The conffiles list and the maintainer scripts (deploy/debian/: what each does is at its top).
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/deploy/debian/conffiles" "${PROJECT_SOURCE_DIR}/deploy/debian/postinst"
    "${PROJECT_SOURCE_DIR}/deploy/debian/prerm" "${PROJECT_SOURCE_DIR}/deploy/debian/postrm")
include(CPack)

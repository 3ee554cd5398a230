# Installs the board's two programs and its systemd unit, and packs them as a .deb with CPack
# (`cpack -G DEB` in a board-only build; scripts/build-board.sh does it). The package is for
# Debian 12 and what is built on it (Raspberry Pi OS Bookworm): the library packages below
# are Debian 12's names.
install(TARGETS tunefarm-rpc-server tunefarm-board-runner RUNTIME DESTINATION bin)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/tunefarm-rpc-server.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/tunefarm-rpc-server.default DESTINATION /etc/default
        RENAME tunefarm-rpc-server)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(TF_DEB_ARCH arm64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^arm")
  set(TF_DEB_ARCH armhf)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
  set(TF_DEB_ARCH amd64)
else()
  set(TF_DEB_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tunefarm-board)
set(CPACK_PACKAGE_VERSION 0.1.0)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "tunefarm maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "tunefarm board daemon: times kernels for holders of a farm lease")
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${TF_DEB_ARCH})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
# dpkg-shlibdeps cannot read foreign-architecture binaries here, so the runtime libraries
# are named by hand (Debian 12 / Raspberry Pi OS Bookworm).
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.36), libstdc++6 (>= 12), libgrpc++1.51, libgrpc29, libprotobuf32, libssl3, libseccomp2, libgomp1")
# The /etc/default file is the owner's to edit: a conffile, kept on upgrade.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)
include(CPack)

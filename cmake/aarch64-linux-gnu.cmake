# Cross-compiling for aarch64 Linux with Debian's gcc-aarch64-linux-gnu and the arm64 multiarch
# libraries (dpkg --add-architecture arm64; libjansson-dev:arm64 ...). `make arm64` uses it;
# the binaries run under qemu-aarch64 (tools/test.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
# pkg-config looks only at the arm64 multiarch .pc files, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
# The host's python3 runs the .py tests (they start the aarch64 binary through qemu).
# (the multiarch libc6:arm64 under /, not the cross package's copy: mixing that ld.so with the
# multiarch libc.so.6 hangs the first pthread_create)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)

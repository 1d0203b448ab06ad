#!/bin/sh
# `cmake --install` into a fresh prefix, then a project outside the tree (examples/cmake_consumer)
# configured with find_package(orthojit) against it, built and run (the C++ runtime and the C API),
# and the C example built a second time with only pkg-config's flags. Checks the versioned
# library names and that the installed libraries do not point back into the build tree.
# usage: install_consumer_test.sh <build dir> <source dir> <work dir>
set -eu
build=$1 source=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd) build=$(cd "$build" && pwd) source=$(cd "$source" && pwd)  # CMake reads relative paths from elsewhere
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(dirname "$(find "$prefix" -name 'liborthojit.so' | head -n 1)")
for name in liborthojit.so liborthojit.so.0 liborthojit_c.so liborthojit_c.so.0; do
  [ -e "$libdir/$name" ] || { echo "FAIL: $libdir/$name is not installed"; exit 1; }
done
if readelf -d "$libdir/liborthojit.so" "$libdir/liborthojit_c.so" | grep -E 'R(UN)?PATH' | grep -q "$build"; then
  echo "FAIL: an installed library's RPATH points into the build tree"; exit 1
fi
cmake -S "$source/examples/cmake_consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
"$work/consumer/orthogonalize_cpp"
"$work/consumer/optimizer_c"
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs orthojit)
cc -std=c99 "$source/examples/cmake_consumer/optimizer.c" $flags -lm -Wl,-rpath,"$libdir" -o "$work/optimizer_pkgconfig"
"$work/optimizer_pkgconfig"
echo "install_consumer_test: OK ($prefix)"

#!/bin/sh
# Installs the build into a temporary prefix, then builds and runs a small
# program against the installed copy, once through pkg-config and once
# through the CMake package. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the programs keep their disk cache here, not in the user's ~/.cache/tlm
mkdir -m 700 "$tmp/cache"
TLM_CACHE_DIR="$tmp/cache"
export TLM_CACHE_DIR
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(find "$tmp/prefix" -name tlm.pc -path '*pkgconfig*' -exec dirname {} \; | head -n 1)
PKG_CONFIG_PATH="$libdir" pkg-config --exists tlm
cc -std=c11 -Wall -Werror "$src/embed.c" -o "$tmp/embed_pc" \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs tlm)
# starts without LD_LIBRARY_PATH (tlm.pc's run path), and the library finds
# the model installed beside it, not the source tree's
TLM_VERBOSE=3 "$tmp/embed_pc" 2>"$tmp/log"
if ! grep -q "model $tmp/prefix/.*tlm/models/" "$tmp/log"; then
  echo "install_test: the installed library did not load the installed model:" >&2
  cat "$tmp/log" >&2
  exit 1
fi
# the prefix moved elsewhere (an installed tree copied to another machine
# or folder; nothing of the build or source tree in its paths): the
# library finds the model beside itself at its new place
mv "$tmp/prefix" "$tmp/moved"
mlib=$(dirname "$(find "$tmp/moved" -name 'libtlm.so*' | head -n 1)")
LD_LIBRARY_PATH="$mlib" TLM_VERBOSE=3 "$tmp/embed_pc" 2>"$tmp/log"
if ! grep -q "model $tmp/moved/.*tlm/models/" "$tmp/log"; then
  echo "install_test: a moved prefix's library did not load its own model:" >&2
  cat "$tmp/log" >&2
  exit 1
fi
mv "$tmp/moved" "$tmp/prefix"
# linked statically through tlm-static.pc: no libtlm.so at run time
cc -std=c11 -Wall -Werror "$src/embed.c" -o "$tmp/embed_static" \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs tlm-static)
if ldd "$tmp/embed_static" | grep -q libtlm; then
  echo "install_test: the static build links libtlm.so" >&2
  exit 1
fi
"$tmp/embed_static"
cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$libdir/.." "$tmp/cm/embed_cmake"
# the source tree moved away: a copy of the sources is configured, built
# (the installed targets only) and installed, then the copy and its build
# are deleted; a program built with pkg-config against that prefix runs
# and loads the installed model, which nothing else could provide now
root=$(cd "$src/../.." && pwd)
mkdir "$tmp/src2"
for f in CMakeLists.txt api engine runtime jit cache generic lm train tools samples tests fuzz cmake models; do
  cp -R "$root/$f" "$tmp/src2/"
done
cmake -S "$tmp/src2" -B "$tmp/b2" -DCMAKE_BUILD_TYPE=Release -DTLM_BUILD_BENCH=OFF \
  -DCMAKE_INSTALL_PREFIX="$tmp/p2" >/dev/null
cmake --build "$tmp/b2" -j2 --target tlm tlm_static tlm_cli >/dev/null
cmake --install "$tmp/b2" >/dev/null
rm -rf "$tmp/src2" "$tmp/b2"
lib2=$(find "$tmp/p2" -name tlm.pc -path '*pkgconfig*' -exec dirname {} \; | head -n 1)
cc -std=c11 -Wall -Werror "$src/embed.c" -o "$tmp/embed_p2" \
  $(PKG_CONFIG_PATH="$lib2" pkg-config --cflags --libs tlm)
TLM_VERBOSE=3 "$tmp/embed_p2" 2>"$tmp/log"
if ! grep -q "model $tmp/p2/.*tlm/models/" "$tmp/log"; then
  echo "install_test: with the source tree gone, the installed model was not loaded:" >&2
  cat "$tmp/log" >&2
  exit 1
fi
echo "install_test: 6 passed, 0 failed"

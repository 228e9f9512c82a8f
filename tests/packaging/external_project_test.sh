#!/usr/bin/env bash
# flow as a package, as a user gets it: `cmake --install` into a temporary prefix, then
# examples/external_project configured and built against it (find_package(flow), flow::flow) and
# compiled a second time with `pkg-config --cflags --libs flow`; both programs train and check
# themselves. Also: every installed header compiles with only the install's include flags,
# nothing installed points into the build or source tree, and installed programs and libraries
# resolve their libraries through their RUNPATH.
# Usage: external_project_test.sh CMAKE BUILD_DIR SOURCE_DIR CXX GENERATOR LIBDIR (relative to the prefix)
set -euo pipefail
cmake=$1 build=$(cd "$2" && pwd) source=$(cd "$3" && pwd) cxx=$4 generator=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix libdir=$work/prefix/$6
fail() { echo "FAIL: $*" >&2; exit 1; }
# Fails unless the program or library $1 finds every library, and flow's in the prefix.
check_loads_from_prefix() {
  ldd "$1" > "$work/ldd.out"
  if grep 'not found' "$work/ldd.out"; then fail "$1: libraries not found"; fi
  for lib in $(awk '/lib(flow_|oneflow_lite)/ {print $3}' "$work/ldd.out"); do
    case "$(realpath "$lib")" in "$libdir"/*) ;; *) fail "$1 loads $lib from outside the prefix" ;; esac
  done
}
# Only the install's own paths: nothing inherited from the environment finds the build tree.
unset LD_LIBRARY_PATH CPATH CPLUS_INCLUDE_PATH LIBRARY_PATH
export PKG_CONFIG_PATH=$libdir/pkgconfig

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/flow/core/flow.h include/flow/graph/graph.h include/flow/job/job.pb.h "$6"/libflow_core.so \
         "$6"/cmake/flow/flowConfig.cmake "$6"/cmake/flow/flowConfigVersion.cmake "$6"/cmake/flow/flowTargets.cmake \
         "$6"/pkgconfig/flow.pc bin/flow_run bin/oneflow_lite_run; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done

echo "== no installed text file or RUNPATH names the build or source tree"
if grep -rIlF -e "$build" -e "$source" "$prefix"; then fail "the files above name $build or $source"; fi
for f in "$libdir"/*.so "$prefix"/bin/*; do
  runpath=$(readelf -d "$f" | grep -E 'RUNPATH|RPATH' || true)
  case "$runpath" in
    *"$build"* | *"$source"*) fail "$f: $runpath" ;;
    *'$ORIGIN'*) ;;
    *) fail "$f has no \$ORIGIN RUNPATH: $runpath" ;;
  esac
done
for f in "$libdir"/libflow_graph.so "$prefix"/bin/oneflow_lite_run "$prefix"/bin/flow_serve; do
  check_loads_from_prefix "$f"
done
"$prefix/bin/oneflow_lite_run" --help > /dev/null
"$prefix/bin/flow_run" --help > /dev/null

echo "== every installed header compiles with pkg-config's flags"
(cd "$prefix/include/flow" && find . -name '*.h' | sort | sed 's|^\./\(.*\)|#include "\1"|') > "$work/all_headers.cpp"
echo "$(wc -l < "$work/all_headers.cpp") headers"
# shellcheck disable=SC2046
"$cxx" -std=c++20 -fsyntax-only $(pkg-config --cflags flow) "$work/all_headers.cpp"

echo "== CMake: find_package(flow) and flow::flow"
"$cmake" -S "$source/examples/external_project" -B "$work/app-build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/app-build"
check_loads_from_prefix "$work/app-build/train_mlp"
"$work/app-build/train_mlp"

echo "== pkg-config --cflags --libs flow"
# shellcheck disable=SC2046
"$cxx" -std=c++20 -O2 "$source/examples/external_project/train_mlp.cpp" -o "$work/train_mlp_pc" $(pkg-config --cflags --libs flow)
check_loads_from_prefix "$work/train_mlp_pc"
"$work/train_mlp_pc" | tail -1
echo "packaging: OK"

#!/usr/bin/env bash
# Packs tunefarm's programs with every shared library they need into one relocatable folder
# or tarball, for machines that run another distribution than Debian 12 (GPU servers with
# Ubuntu 24.04 are typical) and cannot install our packages.
#
# Also packed: LLVM's linker (libexec/ld.lld), which compiles of GPU models start, and the
# Python package (python/tunefarm, where the build has it: any Python 3 imports it with
# PYTHONPATH=<bundle>/python). Left out,
# as the target machine must have them: the C and C++ runtimes (glibc, libstdc++,
# libgcc_s; a newer one runs binaries built against Debian 12's) and the GPU drivers, which
# tunefarm loads at run time (libcuda.so.1, the ROCm runtime).
#
# Layout: bin/NAME is a wrapper that sets LD_LIBRARY_PATH to lib/ and runs libexec/NAME (the
# stripped program); programs find their siblings (the build worker, the board runner) next
# to themselves in libexec/, and children inherit the library path, as do the kernels
# tunefarm compiles and loads (their libgomp comes from lib/).
#
# Usage: scripts/bundle.sh [--build DIR] (--dir OUT | -o OUT.tar.xz)
#   --build DIR   the build folder whose bin/ is packed (default: build)
#   --dir OUT     write the bundle as the folder OUT (replaced if it exists)
#   -o FILE       write it as FILE, a tar.xz (xz -9; about 50 MB) with one folder inside
set -euo pipefail

build=build
dir=""
tarball=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    -o) tarball="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$dir" && -z "$tarball" ]] || [[ -n "$dir" && -n "$tarball" ]]; then
  echo "bundle.sh: give exactly one of --dir OUT and -o FILE.tar.xz" >&2
  exit 2
fi
if [[ ! -x "$build/bin/tunefarm" ]]; then
  echo "bundle.sh: no $build/bin/tunefarm: build first (bash scripts/build.sh)" >&2
  exit 2
fi

# Libraries the target machine provides: the C and C++ runtimes, the dynamic loader, the
# kernel's vDSO, and GPU drivers.
provided='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libnvidia-[^ ]*|libamdhip64|libhsa-runtime64)\.so'

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
name="tunefarm-$(uname -m)"
out="$work/$name"
mkdir -p "$out/bin" "$out/libexec" "$out/lib"
# Every library ldd resolves for $1 (transitively) into lib/, but those the machine provides;
# one that is not found here stops the bundle.
bundle_libraries() {
  while read -r lib path; do
    [[ "$lib" =~ $provided ]] && continue
    [[ -e "$out/lib/$lib" ]] || cp -L "$path" "$out/lib/$lib"
  done < <(ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  if ldd "$1" | grep -q "not found"; then
    echo "bundle.sh: $1 needs a library that is not found here:" >&2
    ldd "$1" | grep "not found" >&2
    exit 1
  fi
}
for program in "$build"/bin/*; do
  [[ -f "$program" && -x "$program" ]] || continue
  base="$(basename "$program")"
  cp "$program" "$out/libexec/$base"
  strip --strip-unneeded "$out/libexec/$base"
  bundle_libraries "$program"
  cat > "$out/bin/$base" <<EOF
#!/bin/sh
# tunefarm bundle: runs libexec/$base with the bundle's libraries (scripts/bundle.sh).
here="\$(dirname "\$(readlink -f "\$0")")/.."
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/libexec/$base" "\$@"
EOF
  chmod +x "$out/bin/$base"
done
# The Python package (python/, docs/python.md): python/tunefarm with its C library, whose
# libraries are the programs' (it finds them in lib/ through its RPATH, $ORIGIN/../../lib, so
# any Python 3 imports it with PYTHONPATH=<bundle>/python and nothing else set).
pkg="$build/python/tunefarm"
if [[ -f "$pkg/libtunefarm_python.so" ]]; then
  mkdir -p "$out/python/tunefarm"
  cp "$pkg"/*.py "$out/python/tunefarm/"
  cp "$pkg/libtunefarm_python.so" "$out/python/tunefarm/"
  strip --strip-unneeded "$out/python/tunefarm/libtunefarm_python.so"
  bundle_libraries "$pkg/libtunefarm_python.so"
fi
# LLVM's linker beside the programs (compiler/link.cc find_lld): GPU model libraries are linked
# by starting it. Its libraries (libLLVM and what libLLVM needs: libxml2, ICU, ...) are those
# tunefarm brought into lib/, but its RUNPATH reaches only its own direct dependencies, and
# the Python package starts it without the wrappers' library path: libexec/ld.lld is a wrapper
# too, running lld (the multiplexer, told its flavour) with lib/ on the path.
cp -L /usr/lib/llvm-19/bin/lld "$out/libexec/lld"
strip --strip-unneeded "$out/libexec/lld"
cat > "$out/libexec/ld.lld" <<'EOF'
#!/bin/sh
# tunefarm bundle: LLVM's ELF linker with the bundle's libraries (scripts/bundle.sh).
here="$(dirname "$(readlink -f "$0")")"
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/lld" -flavor gnu "$@"
EOF
chmod +x "$out/libexec/ld.lld"
# What the bundle holds, and from which commit.
ls "$out/lib" > "$out/LIBRARIES"
git -C "$(dirname "$0")" rev-parse --short HEAD > "$out/VERSION" 2>/dev/null || echo unknown > "$out/VERSION"

if [[ -n "$dir" ]]; then
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  mv "$out" "$dir"
  echo "wrote $dir: $(ls "$dir/bin" | wc -l) programs, $(ls "$dir/lib" | wc -l) libraries, $(du -sh "$dir" | cut -f1)"
else
  tar -C "$work" -cf - "$name" | xz -9 -T0 > "$tarball"
  echo "wrote $tarball ($(du -h "$tarball" | cut -f1)): unpack anywhere and run $name/bin/tunefarm"
fi

#!/usr/bin/env bash
# scripts/bundle.sh: the bundle's programs resolve every library inside it but those the
# target machine provides (C/C++ runtime, loader), and its wrappers run: a compile through
# LLVM and lld in-process, a kernel run that loads libgomp from the bundle, and its ld.lld.
# Usage: bundle_test.sh BUILD_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Refusals: no output named, an unknown flag, a build without programs.
if bash "$src/scripts/bundle.sh" --build "$build" 2> "$tmp/err"; then fail "no output accepted"; fi
grep -q "give exactly one of --dir OUT and -o FILE.tar.xz" "$tmp/err" || fail "message: $(cat "$tmp/err")"
if bash "$src/scripts/bundle.sh" --frobnicate 2> "$tmp/err"; then fail "unknown flag accepted"; fi
grep -q "unknown argument '--frobnicate'" "$tmp/err" || fail "message: $(cat "$tmp/err")"
if bash "$src/scripts/bundle.sh" --build "$tmp/nothing" --dir "$tmp/b" 2> "$tmp/err"; then fail "empty build accepted"; fi
grep -q "no $tmp/nothing/bin/tunefarm" "$tmp/err" || fail "message: $(cat "$tmp/err")"

bash "$src/scripts/bundle.sh" --build "$build" --dir "$tmp/bundle"
b="$tmp/bundle"
allowed='^(linux-vdso|ld-linux[^ ]*|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
for p in "$b"/libexec/*; do
  name="$(basename "$p")"
  # lld is LLVM's linker for the programs (compiler/link.cc find_lld), not one of ours;
  # ld.lld is its wrapper (a script).
  [[ "$name" == ld.lld ]] && continue
  [[ "$name" == lld || -x "$b/bin/$name" ]] || fail "no wrapper bin/$name"
  ! LD_LIBRARY_PATH="$b/lib" ldd "$p" | grep -q "not found" || fail "$name: a library is not found"
  while read -r lib path; do
    if [[ "$path" != "$b/lib/"* && ! "$lib" =~ $allowed ]]; then
      fail "$name resolves $lib outside the bundle ($path)"
    fi
  done < <(LD_LIBRARY_PATH="$b/lib" ldd "$p" | awk '$2 == "=>" {print $1, $3}')
done
[[ -e "$b/lib/libgomp.so.1" ]] || fail "libgomp (the kernels' thread pool) is not in the bundle"
[[ -e "$b/lib/libLLVM.so.19.1" ]] || fail "libLLVM is not in the bundle"
[[ -s "$b/VERSION" && -s "$b/LIBRARIES" ]] || fail "VERSION or LIBRARIES missing"
! ls "$b/lib" | grep -qE '^(libc|libstdc\+\+|libgcc_s)\.so' || fail "the C/C++ runtime was bundled"

# The wrappers run from anywhere, through a symlink too.
ln -s "$b/bin/tunefarm" "$tmp/tf"
(cd / && "$tmp/tf" --version) > "$tmp/version" || fail "tunefarm --version through the wrapper"
"$b/bin/tunefarm" compile -w 'matmul(M=8,N=8,K=8)' --no-db -o "$tmp/k.so" > /dev/null || fail "compile"
"$b/bin/tunefarm" run -w 'matmul(M=16,N=16,K=16)' -c '{"parallel": true}' --no-db --repeat 2 > "$tmp/run" \
  || fail "run: $(cat "$tmp/run")"
grep -q "check     ok" "$tmp/run" || fail "run did not check: $(cat "$tmp/run")"
# The linker it carries runs with the bundle's libraries (GPU model libraries are linked by it
# where no lld-19 is installed).
[[ -x "$b/libexec/ld.lld" ]] || fail "no ld.lld in libexec/"
# It runs with no library path (the Python package starts it from Python): ld.lld is a wrapper
# putting lib/ on the path of lld, whose libraries the loop above found there.
LD_LIBRARY_PATH= "$b/libexec/ld.lld" --version | grep -q "LLD 19" || fail "the bundled ld.lld does not run"
# The Python package runs from the bundle in another Python than the one it was built beside
# (pyenv's 3.12 here, as the GPU servers' venvs), with no library path set: its library finds
# the bundle's lib/ through its RPATH, and the package finds the bundle's tunefarm program.
[[ -f "$b/python/tunefarm/libtunefarm_python.so" && -f "$b/python/tunefarm/__init__.py" ]] \
  || fail "the Python package is not in the bundle"
! LD_LIBRARY_PATH= ldd "$b/python/tunefarm/libtunefarm_python.so" | grep -q "not found" \
  || fail "the Python package's library misses a library: $(ldd "$b/python/tunefarm/libtunefarm_python.so" | grep 'not found')"
py=""
for candidate in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 /usr/bin/python3; do
  [[ -x "$candidate" ]] && { py="$candidate"; break; }
done
PYTHONPATH="$b/python" LD_LIBRARY_PATH= "$py" -c "
import tunefarm, tunefarm._tunefarm as core
assert core.__file__.startswith('$b/'), core.__file__
# GPU model libraries are linked by the bundle's ld.lld (not found beside Python otherwise).
import os
assert os.environ.get('TUNEFARM_LLD') == '$b/libexec/ld.lld', os.environ.get('TUNEFARM_LLD')
print(tunefarm._binary())
k = tunefarm.compile_kernel('matmul(M=4,N=4,K=4)', out='$tmp/pk.so')
print(k.metadata['workload'])
" > "$tmp/py" 2>&1 || fail "the bundle's Python package under $py: $(cat "$tmp/py")"
grep -q "^$b/bin/tunefarm$" "$tmp/py" || fail "the package did not find the bundle's program: $(cat "$tmp/py")"
grep -q "matmul(M=4,N=4,K=4" "$tmp/py" || fail "the package did not compile: $(cat "$tmp/py")"
echo "bundle ok: $(ls "$b/bin" | wc -l) programs, $(ls "$b/lib" | wc -l) libraries, $(du -sh "$b" | cut -f1)"

#!/usr/bin/env bash
# Installs ONNX Runtime 1.30 for Node (onnxruntime-node, its CPU library inside the package),
# the peer the tests compare quantized models with (tests/graph/ort_test.py) and the model
# benchmarks time (bench/model_bench.py). Idempotent: an installed copy is kept.
#
# Where: $TUNEFARM_ORT_DIR, else ~/.cache/tunefarm/ort (outside the checkout, so clean clones
# share it). Needs node and npm: Debian's nodejs and npm are installed when absent.
set -euo pipefail
ORT_DIR="${TUNEFARM_ORT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tunefarm/ort}"
VERSION=1.30.0
if [ -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ] &&
   grep -q "\"version\": \"$VERSION\"" "$ORT_DIR/node_modules/onnxruntime-node/package.json"; then
  echo "install-ort: onnxruntime-node $VERSION present in $ORT_DIR"
  exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
mkdir -p "$ORT_DIR"
# --ignore-scripts: the package's install script only fetches GPU providers.
npm install --prefix "$ORT_DIR" --ignore-scripts --no-audit --no-fund "onnxruntime-node@$VERSION" >/dev/null
echo "install-ort: onnxruntime-node $VERSION installed in $ORT_DIR"

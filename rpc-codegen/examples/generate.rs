//! Generates code for every `.proto` file under a directory, outside of a build script: to look
//! at the output, or (with `scripts/check-protos.sh`) to check that it compiles.
//!
//! ```text
//! cargo run -p rpc-codegen --example generate -- <proto-dir> <out-dir> [<extra-include-dir>...]
//! ```
//!
//! `<proto-dir>` is the first include directory. Besides one `<package>.rs` per package,
//! `<out-dir>/_includes.rs` nests them into modules (prost-build's include file), so
//! `include!("<out-dir>/_includes.rs")` brings in everything.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::{env, fs, io};

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    if args.len() < 2 || args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("usage: generate <proto-dir> <out-dir> [<extra-include-dir>...]");
        return ExitCode::from(2);
    }
    match run(Path::new(&args[0]), Path::new(&args[1]), &args[2..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(proto_dir: &Path, out_dir: &Path, extra_includes: &[String]) -> io::Result<()> {
    let mut protos = Vec::new();
    find_protos(proto_dir, &mut protos)?;
    protos.sort();
    if protos.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no .proto files under {}", proto_dir.display()),
        ));
    }
    let mut includes = vec![proto_dir.to_owned()];
    includes.extend(extra_includes.iter().map(PathBuf::from));

    rpc_codegen::configure()
        .out_dir(out_dir)
        .emit_rerun_if_changed(false)
        .prost_config(|config| {
            config.include_file("_includes.rs");
        })
        .compile_protos(&protos, &includes)?;

    let mut written: Vec<_> = fs::read_dir(out_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    written.sort();
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}

fn find_protos(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            find_protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

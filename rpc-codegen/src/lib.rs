//! Code generation for `rpc-core`, run from a `build.rs`: parses `.proto` files with
//! [protox](https://docs.rs/protox) (pure Rust, no `protoc` needed), generates the message types
//! with [prost-build](https://docs.rs/prost-build), and adds a client and a server module for
//! every service.
//!
//! # Quick start
//!
//! `Cargo.toml` of the crate that uses the generated code:
//!
//! ```toml
//! [dependencies]
//! rpc-core = "0.1"
//! prost = "0.14"
//! # only if the .proto files use well-known types such as google.protobuf.Timestamp:
//! prost-types = "0.14"
//!
//! [build-dependencies]
//! rpc-codegen = "0.1"
//! ```
//!
//! `build.rs`:
//!
//! ```no_run
//! fn main() -> std::io::Result<()> {
//!     rpc_codegen::compile_protos("proto/calculator.proto")
//! }
//! ```
//!
//! `src/lib.rs` (or any module), one `include_proto!` per protobuf package:
//!
//! ```ignore
//! pub mod calc {
//!     rpc_core::include_proto!("calc");
//! }
//! use calc::calculator_client::CalculatorClient;
//! use calc::calculator_server::{Calculator, CalculatorServer};
//! ```
//!
//! Settings go through [`configure`]:
//!
//! ```no_run
//! fn main() -> std::io::Result<()> {
//!     rpc_codegen::configure()
//!         .build_client(false)
//!         // Blocking handlers, for the lowest latency (see `Builder::sync_handlers`)...
//!         .sync_handlers(true)
//!         // ... but this method's async (a whole service may be named too).
//!         .async_handlers_for("calc.Calculator.Evaluate")
//!         .prost_config(|config| {
//!             config.bytes(["."]);
//!         })
//!         .compile_protos(&["proto/calculator.proto"], &["proto"])
//! }
//! ```
//!
//! # What is generated
//!
//! prost-build writes one file per protobuf package into `OUT_DIR`, named `<package>.rs`
//! (`_.rs` for files without a `package`; a nested package `a.b.c` gives `a.b.c.rs`, which the
//! user includes inside `pub mod a { pub mod b { pub mod c { ... } } }`; a package named like a
//! Rust keyword, `type`, gives `r#type.rs` for `pub mod r#type`). Packages refer to each other
//! with `super::` paths, so their modules must be nested as the package names are;
//! `prost_config(|c| { c.include_file("protos.rs"); })` writes a file that does exactly that.
//! Next to the messages, `service Calculator` gives:
//!
//! * `calculator_client::CalculatorClient`, tonic's shape: `new(rpc_core::Client)`,
//!   `connect(dst).await` (tonic's `http://host:port`, or `tcp://`, `verbs://`, `grpc://`), and
//!   per method an async function under its name. Unary `add(req)`: a `ResponseFuture` of
//!   `Result<Response<AddReply>, Status>` (`.await`, or `.wait()` to block). Server streaming:
//!   `Response<Streaming<Resp>>`. Client streaming: `sum(stream)` takes a `Stream` (or a
//!   `Request` of one). Bidirectional: `running_total(stream)` takes a `Stream` and returns
//!   `Response<Streaming<Resp>>`. The streaming futures hold a clone of the connection, not a
//!   borrow of the client.
//! * `calculator_client::blocking::CalculatorClient`: the same methods blocking. Unary
//!   `add(req) -> Result<Response<AddReply>, Status>`; client streaming `sum(requests)` takes
//!   anything iterable; bidirectional `running_total(())` returns a `StreamingCall` (send,
//!   close, receive). `From` turns either client into the other on the same connection.
//! * `calculator_server::Calculator`: the trait with one handler per method, tonic's shapes:
//!   `async fn add(&self, Request<AddRequest>) -> Result<Response<AddReply>, Status>`, a
//!   `Request<Streaming<Req>>` for streamed requests, and for streamed responses an associated
//!   type (`type RunningTotalStream: Stream<Item = Result<SumReply, Status>> + Send + 'static`).
//!   With [`Builder::sync_handlers`] the handlers are plain functions and response streams
//!   `IntoIterator`s. `calculator_server::CalculatorServer<T>` is the
//!   `rpc_core::codegen::Service` to hand to the server builder; `calculator_server::SERVICE`
//!   is the static service descriptor and `calculator_server::FILE_DESCRIPTOR_SET` the encoded
//!   descriptors of the service's `.proto` file and its imports (for server reflection).
//!
//! Every method keeps its index and `MethodDescriptor`; `docs/ARCHITECTURE.md` shows the
//! generated code.
//!
//! The naming rules (tonic's) and how collisions between generated names are resolved are in
//! [`model`]. Generated code only uses fully qualified paths, so messages named `Result`,
//! `Option`, `Box`, `Send`, `Arc`, ... do not break it.
//!
//! # Message types
//!
//! prost-build maps the well-known types to `prost-types` (`google.protobuf.Timestamp` →
//! `::prost_types::Timestamp`, so the user crate needs `prost-types`), and a few to Rust types
//! that implement `prost::Message` themselves: `google.protobuf.Empty` is `()`, the wrapper
//! types are `bool`, `i32`, `String`, ... A method taking `google.protobuf.Empty` is called as
//! `client.ping(())` and its handler gets a `Request<()>`.
//!
//! Types mapped with `prost_build::Config::extern_path` must be given absolute Rust paths
//! (`::my_crate::Msg` or `crate::x::Msg`), as prost-build documents; a relative path is taken
//! to be relative to the package module.
//!
//! # Checking a set of `.proto` files
//!
//! `cargo run -p rpc-codegen --example generate -- <proto-dir> <out-dir>` writes the code for
//! every `.proto` under a directory, to read it; `rpc-codegen/scripts/check-protos.sh
//! <proto-dir>` also compiles it against this workspace's `rpc-core` (`CHECK=clippy` for
//! clippy with `-D warnings`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub mod emit;
pub mod model;
pub mod prost;

pub use prost_build;

use crate::emit::Emit;
use crate::prost::RpcServiceGenerator;

/// Compiles one `.proto` file with the default settings (messages, clients and servers,
/// written to `OUT_DIR`), as tonic-build's `compile_protos` does: its imports are found in its
/// own directory, and the well-known types (`google/protobuf/*.proto`) are built in.
/// [`Builder::compile_protos`] takes several files and include directories.
///
/// # Errors
///
/// A `.proto` file that cannot be read or does not compile (the message names the file, line
/// and column), or an output file that cannot be written.
pub fn compile_protos(proto: impl AsRef<Path>) -> io::Result<()> {
    configure().compile_protos(&[proto], &[] as &[&Path])
}

/// A [`Builder`] with the default settings, to change some before compiling.
pub fn configure() -> Builder {
    Builder {
        build_client: true,
        build_server: true,
        sync_handlers: false,
        handler_overrides: Vec::new(),
        out_dir: None,
        emit_rerun_if_changed: true,
        runtime_crate: None,
        config: prost_build::Config::new(),
    }
}

/// Settings for a code generation run; made by [`configure`].
#[derive(Debug)]
pub struct Builder {
    build_client: bool,
    build_server: bool,
    sync_handlers: bool,
    handler_overrides: Vec<(String, bool)>,
    out_dir: Option<PathBuf>,
    emit_rerun_if_changed: bool,
    runtime_crate: Option<String>,
    config: prost_build::Config,
}

impl Builder {
    /// Whether to generate the `<service>_client` modules (default: yes).
    pub fn build_client(mut self, enable: bool) -> Self {
        self.build_client = enable;
        self
    }

    /// Whether to generate the `<service>_server` modules (default: yes).
    pub fn build_server(mut self, enable: bool) -> Self {
        self.build_server = enable;
        self
    }

    /// Generates plain (blocking) handler functions instead of async ones (default: async).
    ///
    /// Async handlers are the default because they are what tonic users write and what a
    /// handler that calls another service, a database or a timer needs: awaiting parks no
    /// thread. A sync handler saves the task (its future's state) and runs on its worker thread
    /// from start to end: the lowest latency for handlers that never wait, at the cost of a
    /// blocked worker for those that do.
    pub fn sync_handlers(mut self, enable: bool) -> Self {
        self.sync_handlers = enable;
        self
    }

    /// Blocking handlers for one service (`"calc.Calculator"`: its fully qualified protobuf
    /// name) or one method (`"calc.Calculator.Add"`), whatever [`Builder::sync_handlers`]
    /// says for the rest. The most specific setting wins: a method's over its service's, a
    /// service's over the default; of two for the same name, the later. The trait then mixes
    /// plain functions and `async fn`s.
    pub fn sync_handlers_for(mut self, name: impl Into<String>) -> Self {
        self.handler_overrides.push((name.into(), true));
        self
    }

    /// Async handlers for one service or method (named as for
    /// [`Builder::sync_handlers_for`]), where [`Builder::sync_handlers`] made the default
    /// blocking.
    pub fn async_handlers_for(mut self, name: impl Into<String>) -> Self {
        self.handler_overrides.push((name.into(), false));
        self
    }

    /// Where to write the generated files (default: the `OUT_DIR` Cargo gives build scripts).
    /// The directory is created if needed.
    pub fn out_dir(mut self, out_dir: impl AsRef<Path>) -> Self {
        self.out_dir = Some(out_dir.as_ref().to_owned());
        self
    }

    /// Whether to print `cargo:rerun-if-changed` for every `.proto` file read, imports
    /// included (default: yes; turn it off when not running inside a build script).
    pub fn emit_rerun_if_changed(mut self, enable: bool) -> Self {
        self.emit_rerun_if_changed = enable;
        self
    }

    /// The name the generated code calls `rpc-core` by (default: the name the `Cargo.toml`
    /// of the crate being built gives it, found through `CARGO_MANIFEST_DIR`: `rpc_core`, or
    /// `tonic` for `tonic = { package = "rpc-core", .. }`; `rpc_core` if none is found). Set
    /// it when the generated code is compiled by a crate other than the one whose build
    /// script runs this.
    pub fn runtime_crate(mut self, name: impl Into<String>) -> Self {
        self.runtime_crate = Some(name.into().replace('-', "_"));
        self
    }

    /// Changes the prost-build settings: attributes, `bytes`, `btree_map`, `extern_path`,
    /// `include_file`, ... The service generator and the output directory are set by this
    /// builder and override what `f` sets.
    pub fn prost_config(mut self, f: impl FnOnce(&mut prost_build::Config)) -> Self {
        f(&mut self.config);
        self
    }

    /// Parses `protos` with protox and generates code for them and everything they import.
    ///
    /// Every `.proto` file must lie under one of `includes`; an empty `includes` means the
    /// directories of `protos`.
    ///
    /// # Errors
    ///
    /// As [`compile_protos`].
    pub fn compile_protos(
        self,
        protos: &[impl AsRef<Path>],
        includes: &[impl AsRef<Path>],
    ) -> io::Result<()> {
        let includes: Vec<PathBuf> = if includes.is_empty() {
            let mut dirs: Vec<PathBuf> = Vec::new();
            for proto in protos {
                let dir = match proto.as_ref().parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
                    _ => PathBuf::from("."),
                };
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
            dirs
        } else {
            includes.iter().map(|i| i.as_ref().to_owned()).collect()
        };

        let mut compiler = protox::Compiler::new(&includes).map_err(protox_error)?;
        compiler.include_imports(true).include_source_info(true);
        compiler.open_files(protos).map_err(protox_error)?;

        if self.emit_rerun_if_changed {
            for file in compiler.files() {
                if let Some(path) = file.path() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }

        self.compile_fds(compiler.file_descriptor_set())
    }

    /// Generates code for an already parsed set of files (`protox::compile` or
    /// `protoc --include_imports --include_source_info -o` give one).
    ///
    /// # Errors
    ///
    /// The output directory or files cannot be written, or prost-build rejects the set.
    pub fn compile_fds(mut self, fds: prost_types::FileDescriptorSet) -> io::Result<()> {
        if let Some(out_dir) = &self.out_dir {
            fs::create_dir_all(out_dir)?;
            self.config.out_dir(out_dir);
        }
        let emit = Emit {
            client: self.build_client,
            server: self.build_server,
            sync_handlers: self.sync_handlers,
            handler_overrides: std::mem::take(&mut self.handler_overrides),
            runtime_crate: match self.runtime_crate.take() {
                Some(name) => name,
                None => {
                    // The name comes from the manifest: renaming the dependency must
                    // generate again.
                    if self.emit_rerun_if_changed {
                        if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
                            let manifest = PathBuf::from(dir).join("Cargo.toml");
                            println!("cargo:rerun-if-changed={}", manifest.display());
                        }
                    }
                    runtime_crate_name()
                }
            },
        };
        if emit.client || emit.server {
            self.config
                .service_generator(Box::new(RpcServiceGenerator::new(emit, &fds)));
        }
        self.config.compile_fds(fds)
    }
}

/// The name under which the crate being built (`CARGO_MANIFEST_DIR`) depends on `rpc-core`;
/// `rpc_core` when it does not (rpc-core itself names itself so, and the code may be meant
/// for another crate).
fn runtime_crate_name() -> String {
    match proc_macro_crate::crate_name("rpc-core") {
        Ok(proc_macro_crate::FoundCrate::Name(name)) => name,
        Ok(proc_macro_crate::FoundCrate::Itself) | Err(_) => "rpc_core".to_owned(),
    }
}

/// A protox error as an `io::Error` whose message says where (`file:line:column: message`).
fn protox_error(err: protox::Error) -> io::Error {
    let kind = if err.is_file_not_found() {
        io::ErrorKind::NotFound
    } else if err.is_io() {
        io::ErrorKind::Other
    } else {
        io::ErrorKind::InvalidInput
    };
    // protox's `Debug` is the one-line `file:line:col: message` form; `Display` has no location.
    let mut message = format!("{err:?}");
    if let Some(file) = err.file() {
        if !message.contains(file) {
            message = format!("{file}: {message}");
        }
    }
    io::Error::new(kind, format!("failed to compile .proto files: {message}"))
}

//! The whole pipeline (protox → prost-build → service generator) over `proto/tricky`, checked
//! on the generated text. That the text compiles is checked by the `rpc-tests` crate.

use std::fs;
use std::path::{Path, PathBuf};

fn tricky_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/tricky")
}

fn tricky_protos() -> Vec<PathBuf> {
    let mut protos: Vec<PathBuf> = fs::read_dir(tricky_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "proto"))
        .collect();
    protos.sort();
    protos
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn generate(name: &str, builder: rpc_codegen::Builder) -> PathBuf {
    let out = scratch(name);
    builder
        .out_dir(&out)
        .emit_rerun_if_changed(false)
        .compile_protos(&tricky_protos(), &[tricky_dir()])
        .unwrap();
    out
}

fn read(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The text without whitespace and trailing commas, so that checks do not depend on how
/// prettyplease breaks lines.
fn squash(text: &str) -> String {
    let flat: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    flat.replace(",>", ">")
        .replace(",)", ")")
        .replace(",}", "}")
}

/// Whether `haystack` contains `needle`, whitespace ignored.
fn has(haystack: &str, needle: &str) -> bool {
    squash(haystack).contains(&squash(needle))
}

#[test]
fn one_file_per_package_and_all_parse() {
    let out = generate("all", rpc_codegen::configure());
    let mut files: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "_.rs",
            "other.rs",
            "r#type.rs",
            "svc.rs",
            "tricky.nested.deep.rs",
            "tricky.rs"
        ]
    );
    for file in &files {
        let text = read(&out, file);
        if let Err(err) = syn::parse_file(&text) {
            panic!("{file} does not parse: {err}");
        }
    }
}

#[test]
fn names_and_collisions() {
    let out = generate("names", rpc_codegen::configure());
    let tricky = read(&out, "tricky.rs");
    for expected in [
        "pub mod keywords_client",
        "pub struct KeywordsClient",
        "pub mod keywords_server",
        "pub trait Keywords: ::core::marker::Send + ::core::marker::Sync + 'static",
        "pub struct KeywordsServer<T>",
        "pub fn r#match(",
        "pub fn self_(",
        // The async client has the plain names: `FooAsync` keeps `foo_async`.
        "pub fn foo_async(",
        "pub fn get_x_3(",
        "pub fn new_2(",
        "pub fn lower_camel(",
        // Relative paths get one more `super::`, cross-package ones too.
        "IntoRequest<super::Result>",
        "IntoRequest<super::super::other::Msg>",
        // The blocking client, one module deeper, one more.
        "IntoRequest<super::super::Result>",
        "IntoRequest<super::super::super::other::Msg>",
        "ResponseFuture<(), super::super::other::Msg>",
        "IntoRequest<super::outer::Middle>",
        "Response<super::outer::middle::Inner>",
        "Response<::prost_types::Timestamp>",
        // A message's nested-type module took `clash_client`; `FooBar` came before `foo_bar`.
        "pub mod clash_client",
        "pub mod clash2_client",
        "pub mod clash2_server",
        "pub mod foo_bar_client",
        "pub mod foo_bar2_client",
        // `.proto` comments become docs.
        "/// A keyword.",
        "/// Client streaming.",
        "\"/tricky.Keywords/FooAsync\"",
        "rpc_runtime::codegen::MethodKind::BidiStreaming",
        "requests: impl rpc_runtime::codegen::IntoStreamingRequest<Message = ()>",
        "StreamingCall<(), ::prost_types::Timestamp>",
        "type ChatStream:",
    ] {
        assert!(has(&tricky, expected), "tricky.rs lacks `{expected}`");
    }
    // Comment hazards are neutralised.
    assert!(has(&tricky, "```text"));
    assert!(!tricky.contains("///     let indented"));
    assert!(tricky.contains("///   let indented"));

    let svc = read(&out, "svc.rs");
    for expected in [
        "pub trait Self_:",
        "pub struct SelfClient",
        "pub mod self_client",
        "pub mod type_client",
        "pub trait T:",
        "pub struct TServer<S>",
        "impl<S: T> TServer<S>",
        "pub struct SServer<T>",
        "pub mod service_server",
        // `service SERVICE` is `Service` too.
        "pub mod service2_server",
        "pub mod empty_client",
        "pub struct EmptyClient",
        "[rpc_runtime::codegen::MethodDescriptor; 0usize]",
    ] {
        assert!(has(&svc, expected), "svc.rs lacks `{expected}`");
    }

    let deep = read(&out, "tricky.nested.deep.rs");
    assert!(has(
        &deep,
        "IntoRequest<super::super::super::super::other::msg::Sub"
    ));
    assert!(has(&deep, "\"/tricky.nested.deep.Deep/Down\""));

    let bare = read(&out, "_.rs");
    assert!(has(&bare, "pub mod bare_client"));
    assert!(has(&bare, "\"/Bare/Ping\""));
    assert!(has(&bare, "IntoRequest<super::other::Msg>"));

    let kw = read(&out, "r#type.rs");
    assert!(has(&kw, "pub mod use_client"));
    assert!(has(&kw, "super::super::BareRequest"));
}

#[test]
fn client_and_server_can_be_left_out() {
    let out = generate("server_only", rpc_codegen::configure().build_client(false));
    let tricky = read(&out, "tricky.rs");
    assert!(has(&tricky, "pub mod keywords_server"));
    assert!(!has(&tricky, "pub mod keywords_client"));
    assert!(
        has(&tricky, "pub mod clash_client"),
        "prost's own module stays"
    );

    let out = generate("client_only", rpc_codegen::configure().build_server(false));
    let tricky = read(&out, "tricky.rs");
    assert!(has(&tricky, "pub mod keywords_client"));
    assert!(!has(&tricky, "pub mod keywords_server"));

    let out = generate(
        "messages_only",
        rpc_codegen::configure()
            .build_client(false)
            .build_server(false),
    );
    let tricky = read(&out, "tricky.rs");
    assert!(has(&tricky, "pub struct Result"));
    assert!(!has(&tricky, "rpc_runtime"));
}

#[test]
fn prost_config_is_applied() {
    let out = generate(
        "prost_config",
        rpc_codegen::configure().prost_config(|config| {
            config.type_attribute(".other.Msg", "#[derive(Eq, Hash)]");
            config.include_file("_includes.rs");
        }),
    );
    assert!(has(&read(&out, "other.rs"), "#[derive(Eq, Hash)]"));
    assert!(has(&read(&out, "_includes.rs"), "pub mod tricky"));
}

#[test]
fn empty_includes_mean_the_protos_directories() {
    let out = scratch("no_includes");
    rpc_codegen::configure()
        .out_dir(&out)
        .emit_rerun_if_changed(false)
        .compile_protos(&[tricky_dir().join("other.proto")], &[] as &[&Path])
        .unwrap();
    assert!(has(&read(&out, "other.rs"), "pub mod other_client"));
}

#[test]
fn errors_name_file_and_position() {
    let dir = scratch("bad_proto");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("bad.proto"),
        "syntax = \"proto3\";\npackage bad;\nservice S {\n  rpc M(Missing) returns (Missing);\n}\n",
    )
    .unwrap();
    let err = rpc_codegen::configure()
        .out_dir(dir.join("out"))
        .emit_rerun_if_changed(false)
        .compile_protos(&[dir.join("bad.proto")], &[&dir])
        .unwrap_err();
    let message = err.to_string();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{message}");
    assert!(message.contains("bad.proto"), "{message}");
    assert!(message.contains("Missing"), "{message}");
    assert!(message.contains(":4:"), "no line number in: {message}");

    fs::write(
        dir.join("syntax.proto"),
        "syntax = \"proto3\";\nmessage {\n",
    )
    .unwrap();
    let err = rpc_codegen::configure()
        .out_dir(dir.join("out"))
        .emit_rerun_if_changed(false)
        .compile_protos(&[dir.join("syntax.proto")], &[&dir])
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("syntax.proto:2:"), "{message}");

    let err = rpc_codegen::configure()
        .out_dir(dir.join("out"))
        .emit_rerun_if_changed(false)
        .compile_protos(&[dir.join("absent.proto")], &[&dir])
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("absent.proto"), "{err}");
}

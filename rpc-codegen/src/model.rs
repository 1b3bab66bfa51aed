//! The service model the emitters work from, independent of prost-build, and the naming rules
//! that turn `.proto` names into Rust names.
//!
//! # Naming
//!
//! For `service Calculator` in `package calc`:
//!
//! | item | name |
//! | --- | --- |
//! | client module / struct | `calculator_client` / `CalculatorClient` |
//! | server module / trait / struct | `calculator_server` / `Calculator` / `CalculatorServer<T>` |
//! | method `rpc GetValue` | `get_value` and (client) `get_value_async` |
//! | gRPC path | `/calc.Calculator/GetValue` |
//!
//! Rust keywords become raw identifiers (`rpc Match` → `r#match`); the few keywords that cannot be
//! raw (`self`, `super`, `crate`, `Self`, `extern`, `_`) get a trailing underscore (`self_`), and a
//! name starting with a digit gets a leading one — the rules prost-build applies to fields.
//!
//! # Collisions
//!
//! Names are assigned in declaration order and the first comer keeps its name:
//!
//! * A method whose snake-case name, or its `_async` variant, is already taken in the service —
//!   by an earlier method (`Foo` then `FooAsync` both want `foo_async`; `GetX` and `get_x` both
//!   want `get_x`) or by a client constructor (`new`, `connect`, `inner`) — gets the first free
//!   `<name>_2`, `<name>_3`, ... and a doc note says why.
//! * A service whose `<name>_client` / `<name>_server` module is already taken in the package —
//!   by an earlier service (`FooBar` and `foo_bar`), by the nested-type module prost-build emits
//!   for a message (`message CalculatorClient { enum E {...} }` → `mod calculator_client`), or by a
//!   sub-package — gets modules `<name>2_client` / `<name>2_server` (then 3, ...). The type and
//!   trait names inside keep their normal form.

use std::collections::HashSet;

/// Names a client impl already uses for its own functions; methods may not take them.
pub const RESERVED_CLIENT_FNS: &[&str] = &["new", "connect", "inner"];

/// The four RPC shapes, as the generated `MethodDescriptor` records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    /// One request, one response.
    Unary,
    /// A stream of requests, one response.
    ClientStreaming,
    /// One request, a stream of responses.
    ServerStreaming,
    /// Streams both ways.
    BidiStreaming,
}

impl MethodKind {
    /// The kind of a method from its two streaming flags.
    pub fn from_flags(client_streaming: bool, server_streaming: bool) -> MethodKind {
        match (client_streaming, server_streaming) {
            (false, false) => MethodKind::Unary,
            (true, false) => MethodKind::ClientStreaming,
            (false, true) => MethodKind::ServerStreaming,
            (true, true) => MethodKind::BidiStreaming,
        }
    }

    /// The variant's name in `rpc_core::codegen::MethodKind`.
    pub fn variant_name(self) -> &'static str {
        match self {
            MethodKind::Unary => "Unary",
            MethodKind::ClientStreaming => "ClientStreaming",
            MethodKind::ServerStreaming => "ServerStreaming",
            MethodKind::BidiStreaming => "BidiStreaming",
        }
    }
}

/// One method as the `.proto` declares it: the input to [`Service::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodSpec {
    /// The name in the `.proto` (`GetValue`).
    pub proto_name: String,
    /// Request type as a Rust path relative to the package's module (`AddRequest`,
    /// `super::other::Msg`, `outer::Inner`) or absolute (`::prost_types::Timestamp`, `()`).
    pub input_type: String,
    /// Response type, in the same form as `input_type`.
    pub output_type: String,
    /// Fully qualified protobuf name of the request type (`.calc.AddRequest`).
    pub input_proto_type: String,
    /// Fully qualified protobuf name of the response type.
    pub output_proto_type: String,
    /// `stream` on the request.
    pub client_streaming: bool,
    /// `stream` on the response.
    pub server_streaming: bool,
    /// Doc comment lines from the `.proto` (already sanitized for rustdoc).
    pub docs: Vec<String>,
}

/// One method with its Rust names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    /// The name in the `.proto` (`GetValue`).
    pub proto_name: String,
    /// The Rust function name, escaped (`get_value`, `r#match`, `self_`).
    pub rust_name: String,
    /// The gRPC path (`/calc.Calculator/GetValue`).
    pub path: String,
    /// Request type (see [`MethodSpec::input_type`]).
    pub input_type: String,
    /// Response type (see [`MethodSpec::output_type`]).
    pub output_type: String,
    /// Fully qualified protobuf name of the request type.
    pub input_proto_type: String,
    /// Fully qualified protobuf name of the response type.
    pub output_proto_type: String,
    /// Unary or which streaming kind.
    pub kind: MethodKind,
    /// Doc comment lines from the `.proto`.
    pub docs: Vec<String>,
    /// Set when the natural name was taken and the method got a suffixed one: explains why.
    pub rename_note: Option<String>,
}

/// One service with its Rust names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The name in the `.proto` (`Calculator`).
    pub proto_name: String,
    /// The protobuf package (`calc`; empty for a file without `package`).
    pub package: String,
    /// `package.Service`, or just `Service` without a package.
    pub full_name: String,
    /// The server trait (`Calculator`).
    pub trait_name: String,
    /// The client struct (`CalculatorClient`).
    pub client_name: String,
    /// The server struct (`CalculatorServer`).
    pub server_name: String,
    /// The client module (`calculator_client`).
    pub client_mod: String,
    /// The server module (`calculator_server`).
    pub server_mod: String,
    /// Doc comment lines from the `.proto`.
    pub docs: Vec<String>,
    /// Methods in declaration order: index `i` is `METHODS[i]` and `call(i, ..)`.
    pub methods: Vec<Method>,
    /// Set when the natural module names were taken and got a numeric suffix: explains why.
    pub rename_note: Option<String>,
    /// The encoded `FileDescriptorSet` of the defining file and its imports (server
    /// reflection); empty when unknown.
    pub descriptor_set: Vec<u8>,
}

impl Service {
    /// Resolves the Rust names of a service and its methods.
    ///
    /// `taken_modules` holds the module names already used in the package's Rust module
    /// (unescaped); the service's two modules are added to it.
    pub fn new(
        package: &str,
        proto_name: &str,
        docs: Vec<String>,
        methods: Vec<MethodSpec>,
        taken_modules: &mut HashSet<String>,
    ) -> Service {
        let full_name = if package.is_empty() {
            proto_name.to_owned()
        } else {
            format!("{package}.{proto_name}")
        };

        let camel = match upper_camel_case(proto_name) {
            c if c.is_empty() => "Unnamed".to_owned(),
            c => c,
        };
        let snake = match snake_case(proto_name) {
            s if s.is_empty() => "unnamed".to_owned(),
            s => s,
        };
        // `1foo` is not an identifier: prefix like `escape_ident` does. Keywords cannot occur
        // here: every module name carries a `_client`/`_server` suffix.
        let snake = if snake.starts_with(|c: char| c.is_ascii_digit()) {
            format!("_{snake}")
        } else {
            snake
        };
        let mut module_base = snake.clone();
        let mut n = 1u32;
        while taken_modules.contains(&format!("{module_base}_client"))
            || taken_modules.contains(&format!("{module_base}_server"))
        {
            n += 1;
            module_base = format!("{snake}{n}");
        }
        let rename_note = (n > 1).then(|| {
            format!(
                "The modules of this service are `{module_base}_client`/`{module_base}_server`: \
                 `{snake}_client` or `{snake}_server` is already taken in this package."
            )
        });
        let client_mod = format!("{module_base}_client");
        let server_mod = format!("{module_base}_server");
        taken_modules.insert(client_mod.clone());
        taken_modules.insert(server_mod.clone());

        let type_base = escape_ident(&camel);
        // `Self` → `Self_` as the trait; the struct names carry a suffix and need no escape
        // beyond a leading underscore for a digit.
        let struct_base = if camel.starts_with(|c: char| c.is_ascii_digit()) {
            format!("_{camel}")
        } else {
            camel
        };

        Service {
            proto_name: proto_name.to_owned(),
            package: package.to_owned(),
            trait_name: type_base,
            client_name: format!("{struct_base}Client"),
            server_name: format!("{struct_base}Server"),
            client_mod,
            server_mod,
            docs,
            methods: resolve_methods(&full_name, methods),
            full_name,
            rename_note,
            descriptor_set: Vec::new(),
        }
    }

    /// Methods served through the trait (unary ones), with their indices into `METHODS`.
    pub fn unary_methods(&self) -> impl Iterator<Item = (usize, &Method)> {
        self.methods
            .iter()
            .enumerate()
            .filter(|(_, m)| m.kind == MethodKind::Unary)
    }
}

/// Assigns collision-free Rust names to the methods of one service, in declaration order.
fn resolve_methods(full_service_name: &str, specs: Vec<MethodSpec>) -> Vec<Method> {
    let mut taken: HashSet<String> = RESERVED_CLIENT_FNS.iter().map(|s| s.to_string()).collect();
    specs
        .into_iter()
        .map(|spec| {
            let natural = match snake_case(&spec.proto_name) {
                s if s.is_empty() => "unnamed".to_owned(),
                s => s,
            };
            let mut base = natural.clone();
            let mut n = 1u32;
            loop {
                let name = unraw(&escape_ident(&base)).to_owned();
                if taken.insert(name) {
                    break;
                }
                n += 1;
                base = format!("{natural}_{n}");
            }
            let rust_name = escape_ident(&base);
            let rename_note = (n > 1).then(|| {
                format!(
                    "Named `{}` because `{}` is already taken in this service.",
                    unraw(&rust_name),
                    unraw(&escape_ident(&natural)),
                )
            });
            Method {
                path: format!("/{full_service_name}/{}", spec.proto_name),
                rust_name,
                kind: MethodKind::from_flags(spec.client_streaming, spec.server_streaming),
                proto_name: spec.proto_name,
                input_type: spec.input_type,
                output_type: spec.output_type,
                input_proto_type: spec.input_proto_type,
                output_proto_type: spec.output_proto_type,
                docs: spec.docs,
                rename_note,
            }
        })
        .collect()
}

/// `snake_case` the way prost-build converts names (`GetValue` → `get_value`, `HTTPCall` →
/// `http_call`), not escaped.
pub fn snake_case(name: &str) -> String {
    heck::ToSnakeCase::to_snake_case(name)
}

/// `UpperCamelCase` the way prost-build converts names (`calc_service` → `CalcService`), not
/// escaped.
pub fn upper_camel_case(name: &str) -> String {
    heck::ToUpperCamelCase::to_upper_camel_case(name)
}

/// Makes `name` usable as a Rust identifier: keywords become raw identifiers (`r#match`), the
/// keywords that cannot be raw get a trailing underscore (`self_`), and a leading digit gets a
/// leading underscore (`_2fa`).
pub fn escape_ident(name: &str) -> String {
    match name {
        // Strict and reserved keywords of all editions up to 2024.
        "as" | "break" | "const" | "continue" | "else" | "enum" | "false" | "fn" | "for" | "if"
        | "impl" | "in" | "let" | "loop" | "match" | "mod" | "move" | "mut" | "pub" | "ref"
        | "return" | "static" | "struct" | "trait" | "true" | "type" | "unsafe" | "use"
        | "where" | "while" | "dyn" | "abstract" | "become" | "box" | "do" | "final" | "macro"
        | "override" | "priv" | "typeof" | "unsized" | "virtual" | "yield" | "async" | "await"
        | "try" | "gen" => format!("r#{name}"),
        "self" | "super" | "crate" | "Self" | "extern" | "_" => format!("{name}_"),
        n if n.starts_with(|c: char| c.is_ascii_digit()) => format!("_{n}"),
        n => n.to_owned(),
    }
}

/// `name` without a raw-identifier prefix: the form to compare names by.
pub fn unraw(name: &str) -> &str {
    name.strip_prefix("r#").unwrap_or(name)
}

/// Turns `.proto` comment lines into rustdoc lines that do not break `cargo doc` or
/// `cargo test`: bare code fences become `text` fences and indentation outside fences is capped
/// at three spaces (rustdoc would run any other code block as a doctest), `[`/`]` are escaped
/// (no accidental intra-doc links) and bare URLs get angle brackets.
pub fn sanitize_doc_lines(lines: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(lines.len());
    let mut fence: Option<String> = None;
    for line in lines {
        let trimmed = line.trim_start();
        let fence_marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let is_fence = fence_marker.len() >= 3
            && fence_marker
                .chars()
                .all(|c| c == fence_marker.as_bytes()[0] as char);
        if let Some(open) = &fence {
            if is_fence
                && fence_marker.starts_with(open.as_str())
                && trimmed.len() == fence_marker.len()
            {
                fence = None;
                out.push(format!(" {fence_marker}"));
            } else {
                out.push(line.clone());
            }
            continue;
        }
        if is_fence {
            // Whatever language the comment named, never a doctest.
            fence = Some(fence_marker.clone());
            out.push(format!(" {fence_marker}text"));
            continue;
        }
        let indent = line.len() - trimmed.len();
        let body = escape_markdown(trimmed);
        if body.is_empty() {
            out.push(String::new());
        } else {
            out.push(format!("{}{body}", " ".repeat(indent.clamp(1, 3))));
        }
    }
    if let Some(open) = fence {
        // An unterminated fence would swallow whatever rustdoc renders after it.
        out.push(format!(" {open}"));
    }
    out
}

/// Escapes one line of markdown outside code spans: `[`/`]` (no accidental intra-doc links),
/// `<` (no accidental HTML tags), bare URLs wrapped in `<...>`.
fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut in_code = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_code || c == '`' {
            if c == '`' {
                in_code = !in_code;
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let url_start = if rest.starts_with("http://") || rest.starts_with("https://") {
            Some(0)
        } else if rest.starts_with("<http://") || rest.starts_with("<https://") {
            Some(1)
        } else {
            None
        };
        if let Some(skip) = url_start {
            let body = &rest[skip..];
            let mut end = body
                .find(|c: char| c.is_whitespace() || "<>()[]\"'`".contains(c))
                .unwrap_or(body.len());
            // Sentence punctuation after a URL is not part of it.
            while end > 0 && ".,;:!?".contains(body.as_bytes()[end - 1] as char) {
                end -= 1;
            }
            out.push('<');
            out.push_str(&body[..end]);
            out.push('>');
            rest = &body[end..];
            if skip == 1 {
                rest = rest.strip_prefix('>').unwrap_or(rest);
            }
            continue;
        }
        match c {
            '\\' => {
                // Keep an existing escape and the character it escapes.
                out.push(c);
                rest = &rest[1..];
                if let Some(next) = rest.chars().next() {
                    out.push(next);
                    rest = &rest[next.len_utf8()..];
                }
                continue;
            }
            '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            _ => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> MethodSpec {
        MethodSpec {
            proto_name: name.to_owned(),
            input_type: "Req".to_owned(),
            output_type: "Resp".to_owned(),
            input_proto_type: ".pkg.Req".to_owned(),
            output_proto_type: ".pkg.Resp".to_owned(),
            client_streaming: false,
            server_streaming: false,
            docs: Vec::new(),
        }
    }

    fn service(package: &str, name: &str, methods: &[&str]) -> Service {
        Service::new(
            package,
            name,
            Vec::new(),
            methods.iter().map(|m| spec(m)).collect(),
            &mut HashSet::new(),
        )
    }

    #[test]
    fn case_conversion_matches_prost() {
        assert_eq!(snake_case("GetValue"), "get_value");
        assert_eq!(snake_case("HTTPCall"), "http_call");
        assert_eq!(snake_case("getValue"), "get_value");
        assert_eq!(snake_case("get_value"), "get_value");
        assert_eq!(snake_case("Add2Numbers"), "add2_numbers");
        assert_eq!(upper_camel_case("calc_service"), "CalcService");
        assert_eq!(upper_camel_case("Calculator"), "Calculator");
    }

    #[test]
    fn keywords_are_escaped() {
        assert_eq!(escape_ident("match"), "r#match");
        assert_eq!(escape_ident("type"), "r#type");
        assert_eq!(escape_ident("async"), "r#async");
        assert_eq!(escape_ident("gen"), "r#gen");
        assert_eq!(escape_ident("self"), "self_");
        assert_eq!(escape_ident("super"), "super_");
        assert_eq!(escape_ident("crate"), "crate_");
        assert_eq!(escape_ident("Self"), "Self_");
        assert_eq!(escape_ident("2fa"), "_2fa");
        assert_eq!(escape_ident("add"), "add");
        assert_eq!(unraw("r#match"), "match");
        assert_eq!(unraw("self_"), "self_");
    }

    #[test]
    fn tonic_style_names() {
        let s = service("calc", "Calculator", &["Add", "GetValue"]);
        assert_eq!(s.full_name, "calc.Calculator");
        assert_eq!(s.trait_name, "Calculator");
        assert_eq!(s.client_name, "CalculatorClient");
        assert_eq!(s.server_name, "CalculatorServer");
        assert_eq!(s.client_mod, "calculator_client");
        assert_eq!(s.server_mod, "calculator_server");
        assert_eq!(s.rename_note, None);
        let m = &s.methods[1];
        assert_eq!(m.rust_name, "get_value");
        assert_eq!(m.path, "/calc.Calculator/GetValue");
        assert_eq!(m.kind, MethodKind::Unary);
        assert_eq!(m.rename_note, None);
    }

    #[test]
    fn package_less_service_path() {
        let s = service("", "Bare", &["Ping"]);
        assert_eq!(s.full_name, "Bare");
        assert_eq!(s.methods[0].path, "/Bare/Ping");
    }

    #[test]
    fn keyword_methods_and_services() {
        let s = service(
            "k",
            "self",
            &["Match", "Type", "Self", "Super", "Crate", "Async"],
        );
        assert_eq!(s.trait_name, "Self_");
        assert_eq!(s.client_name, "SelfClient");
        assert_eq!(s.server_name, "SelfServer");
        assert_eq!(s.client_mod, "self_client");
        let names: Vec<_> = s.methods.iter().map(|m| m.rust_name.as_str()).collect();
        assert_eq!(
            names,
            ["r#match", "r#type", "self_", "super_", "crate_", "r#async"]
        );
        let t = service("k", "type", &[]);
        assert_eq!(t.trait_name, "Type");
        assert_eq!(t.client_mod, "type_client");
    }

    #[test]
    fn names_that_once_collided_with_async_variants_are_kept() {
        // The async client has the plain names (as tonic's): `FooAsync` is `foo_async`,
        // beside `foo`, in either order.
        let s = service("p", "S", &["Foo", "FooAsync"]);
        let names: Vec<_> = s.methods.iter().map(|m| m.rust_name.as_str()).collect();
        assert_eq!(names, ["foo", "foo_async"]);
        assert!(s.methods.iter().all(|m| m.rename_note.is_none()));
        let s = service("p", "S", &["FooAsync", "Foo"]);
        let names: Vec<_> = s.methods.iter().map(|m| m.rust_name.as_str()).collect();
        assert_eq!(names, ["foo_async", "foo"]);
    }

    #[test]
    fn same_snake_case_and_reserved_names_are_renamed() {
        let s = service(
            "p",
            "S",
            &["GetX", "get_x", "Get_X", "New", "Connect", "Inner"],
        );
        let names: Vec<_> = s.methods.iter().map(|m| m.rust_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "get_x",
                "get_x_2",
                "get_x_3",
                "new_2",
                "connect_2",
                "inner_2"
            ]
        );
        // Paths keep the proto names.
        assert_eq!(s.methods[1].path, "/p.S/get_x");
        let mut all = HashSet::new();
        for m in &s.methods {
            assert!(all.insert(unraw(&m.rust_name).to_owned()));
        }
    }

    #[test]
    fn keyword_collision_uses_unescaped_form() {
        // `Match` → `r#match`, which is taken as `match`: a later `match` (escaped the
        // same) is renamed.
        let s = service("p", "S", &["Match", "match"]);
        assert_eq!(s.methods[0].rust_name, "r#match");
        assert_eq!(s.methods[1].rust_name, "match_2");
    }

    #[test]
    fn module_collisions_get_numbered() {
        let mut taken: HashSet<String> = ["foo_bar_client".to_owned()].into();
        let a = Service::new("p", "FooBar", vec![], vec![], &mut taken);
        assert_eq!(a.client_mod, "foo_bar2_client");
        assert_eq!(a.server_mod, "foo_bar2_server");
        assert_eq!(a.client_name, "FooBarClient");
        assert!(a.rename_note.is_some());
        let b = Service::new("p", "foo_bar", vec![], vec![], &mut taken);
        assert_eq!(b.client_mod, "foo_bar3_client");
        let c = Service::new("p", "Other", vec![], vec![], &mut taken);
        assert_eq!(c.client_mod, "other_client");
        assert!(c.rename_note.is_none());
    }

    #[test]
    fn degenerate_names_still_make_identifiers() {
        let s = service("p", "_", &["_"]);
        assert_eq!(s.trait_name, "Unnamed");
        assert_eq!(s.client_mod, "unnamed_client");
        assert_eq!(s.methods[0].rust_name, "unnamed");
    }

    #[test]
    fn kinds_from_flags() {
        assert_eq!(MethodKind::from_flags(false, false), MethodKind::Unary);
        assert_eq!(
            MethodKind::from_flags(true, false),
            MethodKind::ClientStreaming
        );
        assert_eq!(
            MethodKind::from_flags(false, true),
            MethodKind::ServerStreaming
        );
        assert_eq!(
            MethodKind::from_flags(true, true),
            MethodKind::BidiStreaming
        );
        assert_eq!(MethodKind::BidiStreaming.variant_name(), "BidiStreaming");
    }

    #[test]
    fn docs_cannot_become_doctests_or_links() {
        let lines: Vec<String> = [
            " Adds two numbers, see [Foo] and https://example.com/x. Not `[a] <b>`, <T>.",
            "",
            "     let x = 1; // indented code",
            " ```",
            " fn main() {}",
            " ```",
            " ```rust",
            " unterminated",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = sanitize_doc_lines(&lines);
        assert_eq!(
            out[0],
            r" Adds two numbers, see \[Foo\] and <https://example.com/x>. Not `[a] <b>`, &lt;T>."
        );
        assert_eq!(out[1], "");
        assert_eq!(out[2], "   let x = 1; // indented code");
        assert_eq!(out[3], " ```text");
        assert_eq!(out[4], " fn main() {}");
        assert_eq!(out[5], " ```");
        assert_eq!(out[6], " ```text");
        assert_eq!(out[7], " unterminated");
        assert_eq!(out[8], " ```");
        assert_eq!(out.len(), 9);

        let urls = sanitize_doc_lines(&[
            " see <https://a.example/x>, (http://b.example/y) or \\[c\\]".to_owned(),
        ]);
        assert_eq!(
            urls[0],
            r" see <https://a.example/x>, (<http://b.example/y>) or \[c\]"
        );
    }
}

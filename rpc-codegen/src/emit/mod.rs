//! Turns a [`model::Service`](crate::model::Service) into Rust source: the client module
//! ([`client`]) and the server module ([`server`]), formatted with prettyplease.

pub mod client;
mod common;
pub mod server;

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::Service;
pub use common::message_type;

/// Which halves to emit, and how they name `rpc-core`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emit {
    /// Emit `<service>_client`.
    pub client: bool,
    /// Emit `<service>_server`.
    pub server: bool,
    /// Server handlers are plain (blocking) functions instead of async ones, unless
    /// `handler_overrides` says otherwise for their method or service.
    pub sync_handlers: bool,
    /// Per service (`pkg.Service`) or method (`pkg.Service.Method`): whether its handlers are
    /// blocking. A method's entry wins over its service's, which wins over `sync_handlers`.
    pub handler_overrides: Vec<(String, bool)>,
    /// The name under which the crate using the generated code depends on `rpc-core`:
    /// `rpc_core`, or the name a `Cargo.toml` renames it to (`tonic = { package = "rpc-core" }`
    /// gives `tonic`). Each generated module imports it as `rpc_runtime`.
    pub runtime_crate: String,
}

impl Emit {
    /// Both halves, async handlers, `rpc-core` under its own name.
    pub fn new() -> Emit {
        Emit {
            client: true,
            server: true,
            sync_handlers: false,
            handler_overrides: Vec::new(),
            runtime_crate: "rpc_core".to_owned(),
        }
    }

    /// Whether the handler of `method` of `service` is a blocking function.
    pub fn sync_handler(&self, service: &Service, method: &crate::model::Method) -> bool {
        let method_name = format!("{}.{}", service.full_name, method.proto_name);
        let named = |name: &str| {
            self.handler_overrides
                .iter()
                .rev()
                .find(|(n, _)| n.trim_start_matches('.') == name)
                .map(|&(_, sync)| sync)
        };
        named(&method_name)
            .or_else(|| named(&service.full_name))
            .unwrap_or(self.sync_handlers)
    }
}

impl Default for Emit {
    fn default() -> Emit {
        Emit::new()
    }
}

/// The tokens of everything emitted for `service`.
pub fn service_tokens(service: &Service, emit: &Emit) -> TokenStream {
    let runtime = common::ident(&emit.runtime_crate);
    let client = emit.client.then(|| client::tokens(service, &runtime));
    let sync: Vec<bool> = service
        .methods
        .iter()
        .map(|method| emit.sync_handler(service, method))
        .collect();
    let server = emit
        .server
        .then(|| server::tokens(service, &sync, &runtime));
    quote! { #client #server }
}

/// The formatted source of everything emitted for `service`.
///
/// # Panics
///
/// Panics if the generated tokens are not a valid Rust file, which would be a bug in this
/// crate (every name and type path is validated when it becomes a token).
pub fn service_source(service: &Service, emit: &Emit) -> String {
    let tokens = service_tokens(service, emit);
    let file: syn::File = match syn::parse2(tokens) {
        Ok(file) => file,
        Err(err) => panic!(
            "rpc-codegen produced invalid Rust for service {}: {err}",
            service.full_name
        ),
    };
    prettyplease::unparse(&file)
}

#[cfg(test)]
mod tests {
    use super::common::ident;
    use super::*;
    use quote::ToTokens;

    fn ty(s: &str) -> String {
        message_type(s)
            .to_token_stream()
            .to_string()
            .replace(' ', "")
    }

    #[test]
    fn relative_types_get_one_more_super() {
        assert_eq!(ty("AddRequest"), "super::AddRequest");
        assert_eq!(ty("outer::Inner"), "super::outer::Inner");
        assert_eq!(ty("r#match::Inner"), "super::r#match::Inner");
        assert_eq!(ty("super::other::Msg"), "super::super::other::Msg");
        assert_eq!(ty("Result"), "super::Result");
    }

    #[test]
    fn absolute_and_builtin_types_stay() {
        assert_eq!(ty("()"), "()");
        assert_eq!(ty("::prost_types::Timestamp"), "::prost_types::Timestamp");
        assert_eq!(
            ty("::prost::alloc::vec::Vec<u8>"),
            "::prost::alloc::vec::Vec<u8>"
        );
        assert_eq!(ty("crate::x::Y"), "crate::x::Y");
        assert_eq!(ty("bool"), "bool");
        assert_eq!(ty("u64"), "u64");
    }

    fn calculator() -> Service {
        let method = |name: &str, client_streaming, server_streaming| crate::model::MethodSpec {
            proto_name: name.to_owned(),
            input_type: format!("{name}Request"),
            output_type: format!("{name}Reply"),
            input_proto_type: format!(".calc.{name}Request"),
            output_proto_type: format!(".calc.{name}Reply"),
            client_streaming,
            server_streaming,
            docs: vec![format!(" Does {name}.")],
        };
        Service::new(
            "calc",
            "Calculator",
            vec![" Arithmetic.".to_owned()],
            vec![
                method("Add", false, false),
                method("Sum", true, false),
                method("Count", false, true),
                method("Chat", true, true),
                method("Match", false, false),
            ],
            &mut Default::default(),
        )
    }

    fn squash(text: &str) -> String {
        let flat: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        flat.replace(",>", ">")
            .replace(",)", ")")
            .replace(",}", "}")
    }

    #[test]
    fn emitted_modules_items_and_signatures() {
        let source = service_source(&calculator(), &Emit::new());
        let flat = squash(&source);
        for expected in [
            "pub mod calculator_client",
            "#[allow(unused_imports)] use ::rpc_core as rpc_runtime;",
            "#[derive(Debug, Clone)] pub struct CalculatorClient<T = rpc_runtime::codegen::Channel> { inner: T, }",
            "impl CalculatorClient<rpc_runtime::codegen::Channel>",
            "pub fn new(inner: rpc_runtime::codegen::Client) -> Self",
            "pub async fn connect(dst: impl ::core::convert::AsRef<str>,) \
             -> ::core::result::Result<Self, rpc_runtime::Error>",
            "pub fn inner(&self) -> &rpc_runtime::codegen::Client",
            "pub fn with_interceptor<F: rpc_runtime::codegen::ServiceInterceptor>(inner: rpc_runtime::codegen::Channel, interceptor: F,) \
             -> CalculatorClient<rpc_runtime::codegen::InterceptedService<rpc_runtime::codegen::Channel, F>>",
            "impl<T: rpc_runtime::codegen::ClientChannel> CalculatorClient<T>",
            // The async client: tonic's names.
            "/// Does Add. /// /// Calls `Add`: the future completes when the response arrives.",
            "pub fn add(&mut self, request: impl rpc_runtime::codegen::IntoRequest<super::AddRequest>,) \
             -> rpc_runtime::codegen::ResponseFuture<super::AddReply, super::AddRequest>",
            "rpc_runtime::codegen::ClientChannel::unary(&mut self.inner, &METHODS[0usize],",
            // The streaming ones' futures hold a clone of the connection, not `&self`.
            "pub fn sum(&mut self, requests: impl rpc_runtime::codegen::IntoStreamingRequest<Message = super::SumRequest>,) \
             -> impl ::core::future::Future<Output = ::core::result::Result<rpc_runtime::codegen::Response<super::SumReply>, rpc_runtime::codegen::Status>,>",
            "pub fn count(&mut self, request: impl rpc_runtime::codegen::IntoRequest<super::CountRequest>,) \
             -> impl ::core::future::Future<Output = ::core::result::Result<rpc_runtime::codegen::Response<rpc_runtime::codegen::Streaming<super::CountReply>>, rpc_runtime::codegen::Status>,>",
            "let inner = rpc_runtime::codegen::ClientChannel::channel(&self.inner).clone();",
            "pub fn chat(&mut self, requests: impl rpc_runtime::codegen::IntoStreamingRequest<Message = super::ChatRequest>,)",
            "pub fn r#match(&mut self, request: impl rpc_runtime::codegen::IntoRequest<super::MatchRequest>,) \
             -> rpc_runtime::codegen::ResponseFuture<super::MatchReply, super::MatchRequest>",
            // The blocking client, one module deeper.
            "pub mod blocking",
            "pub fn connect(addr: &str) -> ::core::result::Result<Self, rpc_runtime::Error>",
            "pub fn add(&self, request: impl rpc_runtime::codegen::IntoRequest<super::super::AddRequest>,) \
             -> ::core::result::Result<rpc_runtime::codegen::Response<super::super::AddReply>, rpc_runtime::codegen::Status>",
            "self.inner.unary(&super::METHODS[0usize],",
            "pub fn sum(&self, requests: impl rpc_runtime::codegen::IntoIterRequest<Message = super::super::SumRequest>,) \
             -> ::core::result::Result<rpc_runtime::codegen::Response<super::super::SumReply>, rpc_runtime::codegen::Status>",
            "pub fn count(&self, request: impl rpc_runtime::codegen::IntoRequest<super::super::CountRequest>,) \
             -> ::core::result::Result<rpc_runtime::codegen::Response<rpc_runtime::codegen::Streaming<super::super::CountReply>>, rpc_runtime::codegen::Status>",
            "pub fn chat(&self, request: impl rpc_runtime::codegen::IntoRequest<()>,) \
             -> ::core::result::Result<rpc_runtime::codegen::StreamingCall<super::super::ChatRequest, super::super::ChatReply>, rpc_runtime::codegen::Status>",
            "static METHODS: [rpc_runtime::codegen::MethodDescriptor; 5usize]",
            "rpc_runtime::codegen::MethodDescriptor::new(\"calc.Calculator\", \"Add\", \
             \"/calc.Calculator/Add\", rpc_runtime::codegen::MethodKind::Unary,)",
            "rpc_runtime::codegen::MethodKind::ClientStreaming",
            "rpc_runtime::codegen::MethodKind::ServerStreaming",
            "rpc_runtime::codegen::MethodKind::BidiStreaming",
            "pub mod calculator_server",
            "/// Arithmetic.",
            "pub trait Calculator: ::core::marker::Send + ::core::marker::Sync + 'static",
            "fn add(&self, request: rpc_runtime::codegen::Request<super::AddRequest>,) \
             -> impl ::core::future::Future<Output = ::core::result::Result<rpc_runtime::codegen::Response<super::AddReply>, rpc_runtime::codegen::Status>> + ::core::marker::Send;",
            "fn sum(&self, request: rpc_runtime::codegen::Request<rpc_runtime::codegen::Streaming<super::SumRequest>>,)",
            "type CountStream: rpc_runtime::codegen::Stream<Item = ::core::result::Result<super::CountReply, rpc_runtime::codegen::Status>> + ::core::marker::Send + 'static;",
            "rpc_runtime::codegen::Response<Self::CountStream>",
            "type ChatStream:",
            "fn r#match(&self, request: rpc_runtime::codegen::Request<super::MatchRequest>,)",
            "pub struct CalculatorServer<T> { inner: ::std::sync::Arc<T>, }",
            "impl<T: Calculator> CalculatorServer<T>",
            "pub fn new(inner: T) -> Self",
            "pub fn from_arc(inner: ::std::sync::Arc<T>) -> Self",
            "pub fn with_interceptor<F>(inner: T, interceptor: F,) \
             -> rpc_runtime::codegen::InterceptedService<Self, F> \
             where F: rpc_runtime::codegen::ServiceInterceptor + Clone + Send + Sync + 'static,",
            "impl<T: Calculator> rpc_runtime::codegen::Service for CalculatorServer<T>",
            "fn descriptor(&self) -> &'static rpc_runtime::codegen::ServiceDescriptor { &SERVICE }",
            "0usize => { let inner = ::std::sync::Arc::clone(&self.inner); \
             rpc_runtime::codegen::unary_async(request, reply, move |req| async move { \
             <T as Calculator>::add(&inner, req).await });",
            "rpc_runtime::codegen::client_streaming_async(request, reply,",
            "rpc_runtime::codegen::server_streaming_async(request, reply,",
            "rpc_runtime::codegen::bidi_streaming_async(request, reply,",
            "pub static SERVICE: rpc_runtime::codegen::ServiceDescriptor = \
             rpc_runtime::codegen::ServiceDescriptor { name: \"calc.Calculator\", methods: &METHODS, };",
        ] {
            assert!(flat.contains(&squash(expected)), "missing `{expected}` in:\n{source}");
        }
    }

    #[test]
    fn sync_handlers_are_plain_functions() {
        let source = service_source(
            &calculator(),
            &Emit {
                client: false,
                sync_handlers: true,
                ..Emit::new()
            },
        );
        let flat = squash(&source);
        for expected in [
            "fn add(&self, request: rpc_runtime::codegen::Request<super::AddRequest>,) \
             -> ::core::result::Result<rpc_runtime::codegen::Response<super::AddReply>, rpc_runtime::codegen::Status>;",
            "type CountStream: ::core::iter::IntoIterator<Item = ::core::result::Result<super::CountReply, rpc_runtime::codegen::Status>>;",
            "0usize => { let inner: &T = &self.inner; \
             rpc_runtime::codegen::unary(request, reply, |req| { <T as Calculator>::add(inner, req) });",
            "rpc_runtime::codegen::bidi_streaming(request, reply,",
        ] {
            assert!(flat.contains(&squash(expected)), "missing `{expected}` in:\n{source}");
        }
        assert!(!flat.contains("Future"));
    }

    #[test]
    fn handlers_are_chosen_per_service_and_method() {
        let emit = Emit {
            sync_handlers: true,
            handler_overrides: vec![
                ("calc.Calculator".to_owned(), false),
                (".calc.Calculator.Add".to_owned(), true),
            ],
            ..Emit::new()
        };
        let service = calculator();
        let chosen: Vec<bool> = service
            .methods
            .iter()
            .map(|m| emit.sync_handler(&service, m))
            .collect();
        // The method's setting wins over the service's, which wins over the default.
        assert_eq!(chosen, [true, false, false, false, false]);
        let flat = squash(&service_source(&service, &emit));
        for expected in [
            "fn add(&self, request: rpc_runtime::codegen::Request<super::AddRequest>,) \
             -> ::core::result::Result<rpc_runtime::codegen::Response<super::AddReply>, rpc_runtime::codegen::Status>;",
            "fn sum(&self, request: rpc_runtime::codegen::Request<rpc_runtime::codegen::Streaming<super::SumRequest>>,) \
             -> impl ::core::future::Future<",
            "0usize => { let inner: &T = &self.inner; rpc_runtime::codegen::unary(request, reply,",
            "rpc_runtime::codegen::client_streaming_async(request, reply,",
            "const BLOCKING: &[bool] = &[true, false, false, false, false];",
        ] {
            assert!(flat.contains(&squash(expected)), "missing `{expected}` in:\n{flat}");
        }
    }

    #[test]
    fn halves_can_be_left_out() {
        let client_only = service_source(
            &calculator(),
            &Emit {
                server: false,
                ..Emit::new()
            },
        );
        assert!(client_only.contains("pub mod calculator_client"));
        assert!(!client_only.contains("calculator_server"));
        let server_only = service_source(
            &calculator(),
            &Emit {
                client: false,
                ..Emit::new()
            },
        );
        assert!(!server_only.contains("calculator_client"));
        assert!(server_only.contains("pub mod calculator_server"));
    }

    #[test]
    fn every_module_imports_the_runtime_under_the_users_name_for_it() {
        let source = service_source(
            &calculator(),
            &Emit {
                runtime_crate: "tonic".to_owned(),
                ..Emit::new()
            },
        );
        // The client module, its `blocking` module, the server module.
        assert_eq!(source.matches("use ::tonic as rpc_runtime;").count(), 3);
        assert!(!source.contains("::rpc_core"), "{source}");
    }

    #[test]
    fn raw_identifiers() {
        assert_eq!(ident("r#match").to_string(), "r#match");
        assert_eq!(ident("self_").to_string(), "self_");
    }
}

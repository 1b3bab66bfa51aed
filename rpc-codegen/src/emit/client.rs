//! The `<service>_client` module: a `<Service>Client` wrapping `rpc_core::codegen::Client`, with
//! a blocking and an `_async` function per method, whatever its kind.

use proc_macro2::TokenStream;
use quote::quote;

use super::common::{allow_lints, doc_attrs, ident, message_type, method_docs, methods_static};
use crate::model::{Method, MethodKind, Service};

/// The tokens of the client module of `service`.
pub fn tokens(service: &Service) -> TokenStream {
    let module = ident(&service.client_mod);
    let client = ident(&service.client_name);
    let full_name = &service.full_name;
    let allow = allow_lints();

    let mut mod_docs = vec![format!(" Client for the `{full_name}` service.")];
    if let Some(note) = &service.rename_note {
        mod_docs.push(String::new());
        mod_docs.push(format!(" {note}"));
    }
    let mod_docs = doc_attrs(&mod_docs);

    let mut struct_docs = service.docs.clone();
    if !struct_docs.is_empty() {
        struct_docs.push(String::new());
    }
    struct_docs.push(format!(
        " Client for `{full_name}`: cheap to clone, usable from any thread."
    ));
    let struct_docs = doc_attrs(&struct_docs);

    let functions = service
        .methods
        .iter()
        .enumerate()
        .map(|(index, method)| method_functions(index, method));
    // Nothing refers to an empty table (a service without methods): leave it out.
    let methods = (!service.methods.is_empty()).then(|| methods_static(service));

    quote! {
        #mod_docs
        pub mod #module {
            #allow

            #struct_docs
            #[derive(Debug, Clone)]
            pub struct #client {
                inner: ::rpc_core::codegen::Client,
            }

            impl #client {
                /// Wraps a connected client; several service clients can share one.
                pub fn new(inner: ::rpc_core::codegen::Client) -> Self {
                    Self { inner }
                }

                /// Connects to `addr` with the default settings and `TransportKind::Auto`
                /// (RDMA when available, TCP otherwise).
                pub fn connect(addr: &str) -> ::core::result::Result<Self, ::rpc_core::Error> {
                    let inner = ::rpc_core::codegen::Client::connect(addr)?;
                    ::core::result::Result::Ok(Self::new(inner))
                }

                /// The underlying connection.
                pub fn inner(&self) -> &::rpc_core::codegen::Client {
                    &self.inner
                }

                #( #functions )*
            }

            #methods
        }
    }
}

fn method_functions(index: usize, method: &Method) -> TokenStream {
    let name = ident(&method.rust_name);
    let async_name = ident(&method.async_name);
    let input = message_type(&method.input_type);
    let output = message_type(&method.output_type);
    let proto_name = &method.proto_name;
    let cg = quote!(::rpc_core::codegen);
    let status = quote!(#cg::Status);
    let docs = method_docs(method, &format!("Calls `{proto_name}`."));
    let async_docs = |lines: &[&str]| {
        let mut all = method.docs.clone();
        if !all.is_empty() {
            all.push(String::new());
        }
        all.extend(lines.iter().map(|l| format!(" {l}")));
        if let Some(note) = &method.rename_note {
            all.push(String::new());
            all.push(format!(" {note}"));
        }
        doc_attrs(&all)
    };
    match method.kind {
        MethodKind::Unary => {
            let async_docs = async_docs(&[
                &format!("Calls `{proto_name}` without blocking: the future completes when the"),
                "response arrives. Await it from any executor, or `wait()` for it; dropping it",
                "first cancels the call.",
            ]);
            quote! {
                #docs
                pub fn #name(
                    &self,
                    request: impl #cg::IntoRequest<#input>,
                ) -> ::core::result::Result<#cg::Response<#output>, #status> {
                    self.inner.unary(
                        &METHODS[#index],
                        <_ as #cg::IntoRequest<#input>>::into_request(request),
                    )
                }

                #async_docs
                pub fn #async_name(
                    &self,
                    request: impl #cg::IntoRequest<#input>,
                ) -> #cg::ResponseFuture<#output> {
                    self.inner.unary_async(
                        &METHODS[#index],
                        <_ as #cg::IntoRequest<#input>>::into_request(request),
                    )
                }
            }
        }
        MethodKind::ServerStreaming => {
            let async_docs = async_docs(&[
                &format!("Calls `{proto_name}` without blocking: resolves when the response"),
                "headers arrive; the responses then come from the stream.",
            ]);
            quote! {
                #docs
                ///
                /// Blocks until the response headers arrive; the responses then come from the
                /// stream (an iterator that blocks, or a `Stream`).
                pub fn #name(
                    &self,
                    request: impl #cg::IntoRequest<#input>,
                ) -> ::core::result::Result<#cg::Response<#cg::Streaming<#output>>, #status> {
                    self.inner.server_streaming(
                        &METHODS[#index],
                        <_ as #cg::IntoRequest<#input>>::into_request(request),
                    )
                }

                #async_docs
                pub async fn #async_name(
                    &self,
                    request: impl #cg::IntoRequest<#input>,
                ) -> ::core::result::Result<#cg::Response<#cg::Streaming<#output>>, #status> {
                    self.inner
                        .server_streaming_async(
                            &METHODS[#index],
                            <_ as #cg::IntoRequest<#input>>::into_request(request),
                        )
                        .await
                }
            }
        }
        MethodKind::ClientStreaming => {
            let async_docs = async_docs(&[
                &format!("Calls `{proto_name}` with a `Stream` of requests (or a `Request` of"),
                "one): the future pulls the stream while it is polled and resolves with the",
                "response.",
            ]);
            quote! {
                #docs
                ///
                /// Sends the requests (a `Vec`, an iterator, or a `Request` of one), then blocks
                /// for the response.
                pub fn #name(
                    &self,
                    requests: impl #cg::IntoIterRequest<Message = #input>,
                ) -> ::core::result::Result<#cg::Response<#output>, #status> {
                    self.inner.client_streaming(
                        &METHODS[#index],
                        #cg::IntoIterRequest::into_iter_request(requests),
                    )
                }

                #async_docs
                pub async fn #async_name(
                    &self,
                    requests: impl #cg::IntoStreamingRequest<Message = #input>,
                ) -> ::core::result::Result<#cg::Response<#output>, #status> {
                    self.inner
                        .client_streaming_async(
                            &METHODS[#index],
                            #cg::IntoStreamingRequest::into_streaming_request(requests),
                        )
                        .await
                }
            }
        }
        MethodKind::BidiStreaming => {
            let async_docs = async_docs(&[
                &format!("Calls `{proto_name}` with a `Stream` of requests (or a `Request` of"),
                "one); resolves when the response headers arrive. The requests are pulled while",
                "this future or the response stream is polled: keep reading responses.",
            ]);
            quote! {
                #docs
                ///
                /// Opens the call and returns its handle: `send` requests, `close_send`, and
                /// `recv` responses, blocking (or their async forms), interleaved as the
                /// protocol of the method needs. `request` carries metadata and a timeout
                /// (`()` for none).
                pub fn #name(
                    &self,
                    request: impl #cg::IntoRequest<()>,
                ) -> ::core::result::Result<#cg::StreamingCall<#input, #output>, #status> {
                    self.inner.streaming(
                        &METHODS[#index],
                        <_ as #cg::IntoRequest<()>>::into_request(request),
                    )
                }

                #async_docs
                pub async fn #async_name(
                    &self,
                    requests: impl #cg::IntoStreamingRequest<Message = #input>,
                ) -> ::core::result::Result<#cg::Response<#cg::Streaming<#output>>, #status> {
                    self.inner
                        .bidi_streaming_async(
                            &METHODS[#index],
                            #cg::IntoStreamingRequest::into_streaming_request(requests),
                        )
                        .await
                }
            }
        }
    }
}

//! The `<service>_client` module: a `<Service>Client` wrapping `rpc_core::codegen::Client`, one
//! blocking and one `_async` function per unary method, one stub per streaming method.

use proc_macro2::TokenStream;
use quote::quote;

use super::{
    allow_lints, doc_attrs, ident, kind_phrase, message_type, method_docs, methods_static,
};
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
    let input = message_type(&method.input_type);
    let output = message_type(&method.output_type);
    let proto_name = &method.proto_name;
    let status = quote!(::rpc_core::codegen::Status);
    match method.kind {
        MethodKind::Unary => {
            let async_name = ident(&method.async_name);
            let docs = method_docs(method, &format!("Calls `{proto_name}`."));
            let mut async_docs = method.docs.clone();
            if !async_docs.is_empty() {
                async_docs.push(String::new());
            }
            async_docs.push(format!(
                " Calls `{proto_name}` without blocking: the future completes when the"
            ));
            async_docs.push(
                " response arrives. Await it from any executor, or `wait()` for it.".to_owned(),
            );
            if let Some(note) = &method.rename_note {
                async_docs.push(String::new());
                async_docs.push(format!(" {note}"));
            }
            let async_docs = doc_attrs(&async_docs);
            quote! {
                #docs
                pub fn #name(
                    &self,
                    request: impl ::rpc_core::codegen::IntoRequest<#input>,
                ) -> ::core::result::Result<#output, #status> {
                    self.inner.unary(
                        &METHODS[#index],
                        <_ as ::rpc_core::codegen::IntoRequest<#input>>::into_request(request),
                    )
                }

                #async_docs
                pub fn #async_name(
                    &self,
                    request: impl ::rpc_core::codegen::IntoRequest<#input>,
                ) -> ::rpc_core::codegen::ResponseFuture<#output> {
                    self.inner.unary_async(
                        &METHODS[#index],
                        <_ as ::rpc_core::codegen::IntoRequest<#input>>::into_request(request),
                    )
                }
            }
        }
        kind => {
            let docs = method_docs(method, &format!("Calls `{proto_name}`."));
            let note = doc_attrs(&[
                String::new(),
                format!(
                    " `{proto_name}` is {} and streaming is not supported yet: this always",
                    kind_phrase(kind)
                ),
                " returns an `UNIMPLEMENTED` status.".to_owned(),
            ]);
            let (param, param_type) = match kind {
                MethodKind::ClientStreaming | MethodKind::BidiStreaming => (
                    quote!(requests),
                    quote!(impl ::core::iter::IntoIterator<Item = #input>),
                ),
                _ => (
                    quote!(request),
                    quote!(impl ::rpc_core::codegen::IntoRequest<#input>),
                ),
            };
            let output = match kind {
                MethodKind::ServerStreaming | MethodKind::BidiStreaming => {
                    quote!(::std::vec::Vec<#output>)
                }
                _ => quote!(#output),
            };
            quote! {
                #docs
                #note
                pub fn #name(
                    &self,
                    #param: #param_type,
                ) -> ::core::result::Result<#output, #status> {
                    let _ = #param;
                    ::core::result::Result::Err(
                        ::rpc_core::codegen::streaming_unimplemented(&METHODS[#index]),
                    )
                }
            }
        }
    }
}

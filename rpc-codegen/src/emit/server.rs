//! The `<service>_server` module: the `<Service>` trait (unary methods), the `<Service>Server<T>`
//! adapter implementing `rpc_core::codegen::Service`, and the static descriptors.

use proc_macro2::TokenStream;
use quote::quote;

use super::{
    allow_lints, doc_attrs, ident, kind_phrase, message_type, method_docs, methods_static,
};
use crate::model::Service;

/// The tokens of the server module of `service`.
pub fn tokens(service: &Service) -> TokenStream {
    let module = ident(&service.server_mod);
    let trait_ = ident(&service.trait_name);
    let server = ident(&service.server_name);
    // The generic parameter must not shadow the trait (`service T`).
    let generic = ident(if service.trait_name == "T" { "S" } else { "T" });
    let full_name = &service.full_name;
    let allow = allow_lints();

    let mut mod_docs = vec![format!(" Server side of the `{full_name}` service.")];
    if let Some(note) = &service.rename_note {
        mod_docs.push(String::new());
        mod_docs.push(format!(" {note}"));
    }
    let mod_docs = doc_attrs(&mod_docs);

    let mut trait_docs = service.docs.clone();
    if !trait_docs.is_empty() {
        trait_docs.push(String::new());
    }
    trait_docs.push(format!(
        " The handlers of `{full_name}`: implement this and serve it with `{}::new`.",
        service.server_name
    ));
    let streaming: Vec<String> = service
        .methods
        .iter()
        .filter(|m| m.kind != crate::model::MethodKind::Unary)
        .map(|m| format!("`{}` ({})", m.proto_name, kind_phrase(m.kind)))
        .collect();
    if !streaming.is_empty() {
        trait_docs.push(String::new());
        trait_docs.push(format!(
            " Streaming methods are not supported yet and are answered with `UNIMPLEMENTED`: {}.",
            streaming.join(", ")
        ));
    }
    let trait_docs = doc_attrs(&trait_docs);

    let trait_methods = service.unary_methods().map(|(_, method)| {
        let name = ident(&method.rust_name);
        let input = message_type(&method.input_type);
        let output = message_type(&method.output_type);
        let docs = method_docs(method, &format!("Handles `{}`.", method.proto_name));
        quote! {
            #docs
            fn #name(
                &self,
                request: ::rpc_core::codegen::Request<#input>,
            ) -> ::core::result::Result<#output, ::rpc_core::codegen::Status>;
        }
    });

    let arms: Vec<TokenStream> = service
        .unary_methods()
        .map(|(index, method)| {
            let name = ident(&method.rust_name);
            quote! {
                #index => {
                    let inner: &#generic = &self.inner;
                    ::rpc_core::codegen::unary(request, reply, |req| {
                        <#generic as #trait_>::#name(inner, req)
                    });
                }
            }
        })
        .collect();
    let call_body = if arms.is_empty() {
        quote! {
            let _ = method_index;
            ::rpc_core::codegen::unimplemented(request, reply);
        }
    } else {
        quote! {
            match method_index {
                #( #arms )*
                // Streaming methods, and indices out of range.
                _ => {
                    ::rpc_core::codegen::unimplemented(request, reply);
                }
            }
        }
    };

    let methods = methods_static(service);

    quote! {
        #mod_docs
        pub mod #module {
            #allow

            #trait_docs
            pub trait #trait_: ::core::marker::Send + ::core::marker::Sync + 'static {
                #( #trait_methods )*
            }

            /// Serves a handler implementation: pass it to the server builder's `add_service`.
            pub struct #server<#generic> {
                inner: ::std::sync::Arc<#generic>,
            }

            impl<#generic: #trait_> #server<#generic> {
                /// Serves `inner`.
                pub fn new(inner: #generic) -> Self {
                    Self::from_arc(::std::sync::Arc::new(inner))
                }

                /// Serves a shared `inner`.
                pub fn from_arc(inner: ::std::sync::Arc<#generic>) -> Self {
                    Self { inner }
                }

                /// The handler implementation.
                pub fn inner(&self) -> &::std::sync::Arc<#generic> {
                    &self.inner
                }
            }

            impl<#generic> ::core::clone::Clone for #server<#generic> {
                fn clone(&self) -> Self {
                    Self { inner: ::std::sync::Arc::clone(&self.inner) }
                }
            }

            impl<#generic: #trait_> ::rpc_core::codegen::Service for #server<#generic> {
                fn descriptor(&self) -> &'static ::rpc_core::codegen::ServiceDescriptor {
                    &SERVICE
                }

                fn call(
                    &self,
                    method_index: usize,
                    request: ::rpc_core::codegen::IncomingRequest,
                    reply: ::rpc_core::codegen::ReplySink,
                ) {
                    #call_body
                }
            }

            /// The static description of this service.
            pub static SERVICE: ::rpc_core::codegen::ServiceDescriptor =
                ::rpc_core::codegen::ServiceDescriptor {
                    name: #full_name,
                    methods: &METHODS,
                };

            #methods
        }
    }
}

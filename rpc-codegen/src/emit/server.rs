//! The `<service>_server` module: the `<Service>` trait (one handler per method, async by
//! default, plain functions with `Builder::sync_handlers`), the `<Service>Server<T>` adapter
//! implementing `rpc_core::codegen::Service`, and the static descriptors.

use proc_macro2::TokenStream;
use quote::quote;

use super::common::{doc_attrs, ident, message_type, method_docs, methods_static, module_prelude};
use crate::model::{upper_camel_case, Method, MethodKind, Service};

/// The name of a streaming-response method's associated type (`StreamingOutputCallStream`),
/// as tonic names it.
pub fn stream_type_name(method: &Method) -> String {
    format!("{}Stream", upper_camel_case(&method.proto_name))
}

/// The tokens of the server module of `service` (`sync[i]`: method `i`'s handler is a
/// blocking function).
pub fn tokens(service: &Service, sync: &[bool], runtime: &syn::Ident) -> TokenStream {
    let module = ident(&service.server_mod);
    let trait_ = ident(&service.trait_name);
    let server = ident(&service.server_name);
    // The generic parameter must not shadow the trait (`service T`).
    let generic = ident(if service.trait_name == "T" { "S" } else { "T" });
    let full_name = &service.full_name;
    let allow = module_prelude(runtime);

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
    if sync.iter().any(|&s| s) && sync.iter().any(|&s| !s) {
        trait_docs.push(String::new());
        trait_docs.push(
            " The build script chose some handlers blocking: those are plain functions, run to"
                .to_owned(),
        );
        trait_docs.push(" their end on a worker thread; the others are async.".to_owned());
    }
    if sync.iter().any(|&s| !s) {
        trait_docs.push(String::new());
        trait_docs.push(
            " Handlers are async: write them as `async fn`. A handler's future runs on the server's"
                .to_owned(),
        );
        trait_docs.push(
            " worker pool without any async runtime, and is dropped if the client cancels the call."
                .to_owned(),
        );
    }
    let trait_docs = doc_attrs(&trait_docs);

    let trait_items = service
        .methods
        .iter()
        .zip(sync)
        .map(|(method, &sync)| trait_item(method, sync));
    let arms = service
        .methods
        .iter()
        .enumerate()
        .map(|(index, method)| call_arm(index, method, sync[index], &generic, &trait_));
    let call_body = if service.methods.is_empty() {
        quote! {
            let _ = (method_index, request);
            reply.fail(rpc_runtime::codegen::Status::unimplemented("this service has no methods"));
        }
    } else {
        quote! {
            match method_index {
                #( #arms )*
                _ => {
                    let _ = request;
                    reply.fail(rpc_runtime::codegen::Status::unimplemented("no such method"));
                }
            }
        }
    };

    let methods = methods_static(service);
    let descriptor_set = proc_macro2::Literal::byte_string(&service.descriptor_set);

    quote! {
        #mod_docs
        pub mod #module {
            #allow

            #trait_docs
            pub trait #trait_: ::core::marker::Send + ::core::marker::Sync + 'static {
                #( #trait_items )*
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

                /// Serves `inner` behind `interceptor`, which sees this service's calls only
                /// (tonic's `with_interceptor`, tonic's `Interceptor` trait; each call runs
                /// on a clone of it): it may check or change their metadata, put values into
                /// their extensions, or refuse them with a status.
                pub fn with_interceptor<F>(
                    inner: #generic,
                    interceptor: F,
                ) -> rpc_runtime::codegen::InterceptedService<Self, F>
                where
                    F: rpc_runtime::codegen::ServiceInterceptor + Clone + Send + Sync + 'static,
                {
                    rpc_runtime::codegen::InterceptedService::new(Self::new(inner), interceptor)
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

            impl<#generic> rpc_runtime::codegen::NamedService for #server<#generic> {
                const NAME: &'static str = #full_name;
            }

            impl<#generic: #trait_> rpc_runtime::codegen::Service for #server<#generic> {
                fn descriptor(&self) -> &'static rpc_runtime::codegen::ServiceDescriptor {
                    &SERVICE
                }

                fn file_descriptor_set(&self) -> &'static [u8] {
                    FILE_DESCRIPTOR_SET
                }

                fn blocking_handler(&self, method_index: usize) -> bool {
                    const BLOCKING: &[bool] = &[ #( #sync ),* ];
                    BLOCKING.get(method_index).copied().unwrap_or(false)
                }

                fn call(
                    &self,
                    method_index: usize,
                    request: rpc_runtime::codegen::IncomingRequest,
                    reply: rpc_runtime::codegen::ReplySink,
                ) {
                    #call_body
                }
            }

            /// The encoded `FileDescriptorSet` of the service's `.proto` file and its imports
            /// (for server reflection).
            pub static FILE_DESCRIPTOR_SET: &[u8] = #descriptor_set;

            /// The static description of this service.
            pub static SERVICE: rpc_runtime::codegen::ServiceDescriptor =
                rpc_runtime::codegen::ServiceDescriptor {
                    name: #full_name,
                    methods: &METHODS,
                };

            #methods
        }
    }
}

/// The trait's items for one method: its handler, and for a streaming response the stream's
/// associated type.
fn trait_item(method: &Method, sync: bool) -> TokenStream {
    let name = ident(&method.rust_name);
    let input = message_type(&method.input_type);
    let output = message_type(&method.output_type);
    let docs = method_docs(method, &format!("Handles `{}`.", method.proto_name));
    let cg = quote!(rpc_runtime::codegen);
    let request = match method.kind {
        MethodKind::Unary | MethodKind::ServerStreaming => quote!(#cg::Request<#input>),
        MethodKind::ClientStreaming | MethodKind::BidiStreaming => {
            quote!(#cg::Request<#cg::Streaming<#input>>)
        }
    };
    let streams = matches!(
        method.kind,
        MethodKind::ServerStreaming | MethodKind::BidiStreaming
    );
    let stream_type = ident(&stream_type_name(method));
    let (assoc, response) = if streams {
        let bound = if sync {
            quote!(::core::iter::IntoIterator<Item = ::core::result::Result<#output, #cg::Status>>)
        } else {
            quote!(#cg::Stream<Item = ::core::result::Result<#output, #cg::Status>>
                + ::core::marker::Send + 'static)
        };
        let assoc_doc = format!(" The response stream of `{}`.", method.proto_name);
        (
            quote! {
                #[doc = #assoc_doc]
                type #stream_type: #bound;
            },
            quote!(#cg::Response<Self::#stream_type>),
        )
    } else {
        (quote!(), quote!(#cg::Response<#output>))
    };
    let result = quote!(::core::result::Result<#response, #cg::Status>);
    let ret = if sync {
        result
    } else {
        quote!(impl ::core::future::Future<Output = #result> + ::core::marker::Send)
    };
    quote! {
        #assoc
        #docs
        fn #name(&self, request: #request) -> #ret;
    }
}

/// The `match` arm running method `index`.
fn call_arm(
    index: usize,
    method: &Method,
    sync: bool,
    generic: &syn::Ident,
    trait_: &syn::Ident,
) -> TokenStream {
    let name = ident(&method.rust_name);
    let helper = ident(&format!(
        "{}{}",
        match method.kind {
            MethodKind::Unary => "unary",
            MethodKind::ServerStreaming => "server_streaming",
            MethodKind::ClientStreaming => "client_streaming",
            MethodKind::BidiStreaming => "bidi_streaming",
        },
        if sync { "" } else { "_async" }
    ));
    if sync {
        quote! {
            #index => {
                let inner: &#generic = &self.inner;
                rpc_runtime::codegen::#helper(request, reply, |req| {
                    <#generic as #trait_>::#name(inner, req)
                });
            }
        }
    } else {
        quote! {
            #index => {
                let inner = ::std::sync::Arc::clone(&self.inner);
                rpc_runtime::codegen::#helper(request, reply, move |req| async move {
                    <#generic as #trait_>::#name(&inner, req).await
                });
            }
        }
    }
}

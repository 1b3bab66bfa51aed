//! The `<service>_client` module, in tonic's shape: a `<Service>Client` whose methods are
//! async under the proto's names (`client.get_value(request).await`), and the same client
//! with blocking methods in its `blocking` module. Both wrap `rpc_core::codegen::Client`.

use proc_macro2::TokenStream;
use quote::quote;

use super::common::{doc_attrs, ident, message_type, method_docs, methods_static, module_prelude};
use crate::model::{Method, MethodKind, Service};

/// The tokens of the client module of `service`.
pub fn tokens(service: &Service, runtime: &syn::Ident) -> TokenStream {
    let module = ident(&service.client_mod);
    let client = ident(&service.client_name);
    let full_name = &service.full_name;
    let allow = module_prelude(runtime);

    let mut mod_docs = vec![format!(" Client for the `{full_name}` service.")];
    if let Some(note) = &service.rename_note {
        mod_docs.push(String::new());
        mod_docs.push(format!(" {note}"));
    }
    let mod_docs = doc_attrs(&mod_docs);

    let struct_docs = |lines: &[String]| {
        let mut all = service.docs.clone();
        if !all.is_empty() {
            all.push(String::new());
        }
        all.extend(lines.iter().cloned());
        doc_attrs(&all)
    };
    let async_docs = struct_docs(&[
        format!(" Client for `{full_name}`: every method is async, as tonic's are (`.await` it"),
        " from any executor). Cheap to clone, usable from any thread; several service clients"
            .to_string(),
        format!(
            " can share one connection. [`blocking::{}`] has the same methods blocking.",
            service.client_name
        ),
        String::new(),
        " `T` is the connection, tonic's parameter: the default, `Channel`".to_string(),
        " (`rpc_core::transport::Channel`, an `rpc_core::Client`), or, made by".to_string(),
        " `with_interceptor`, `InterceptedService<Channel, F>`; so signatures written for tonic"
            .to_string(),
        format!(
            " (`{0}<Channel>`, `{0}<InterceptedService<Channel, F>>`) compile unchanged.",
            service.client_name
        ),
    ]);
    let blocking_docs = struct_docs(&[
        format!(" Client for `{full_name}` whose methods block until the call is over (a bidi"),
        " method returns a handle to send and receive with). Cheap to clone, usable from any"
            .to_string(),
        format!(
            " thread; [`super::{}`] is the async one.",
            service.client_name
        ),
    ]);

    let async_functions = service
        .methods
        .iter()
        .enumerate()
        .map(|(index, method)| async_function(index, method));
    let blocking_functions = service
        .methods
        .iter()
        .enumerate()
        .map(|(index, method)| blocking_function(index, method));
    // Nothing refers to an empty table (a service without methods): leave it out.
    let methods = (!service.methods.is_empty()).then(|| methods_static(service));
    let cg = quote!(rpc_runtime::codegen);

    quote! {
        #mod_docs
        pub mod #module {
            #allow

            #async_docs
            #[derive(Debug, Clone)]
            pub struct #client<T = #cg::Channel> {
                inner: T,
            }

            impl #client<#cg::Channel> {
                /// Wraps a connected client; several service clients can share one.
                pub fn new(inner: #cg::Client) -> Self {
                    Self { inner }
                }

                /// Connects to `dst` with the default settings: tonic's `http://host:port`
                /// (RDMA when both sides can, else TCP, else standard gRPC when an HTTP/2
                /// server answers), or `tcp://`, `verbs://`, `grpc://` to choose, or a bare
                /// `host:port`. The connection is made on a thread of
                /// its own: the future does not block its executor.
                pub async fn connect(
                    dst: impl ::core::convert::AsRef<str>,
                ) -> ::core::result::Result<Self, rpc_runtime::Error> {
                    let inner = #cg::Client::connect_async(dst.as_ref()).await?;
                    ::core::result::Result::Ok(Self::new(inner))
                }

                /// The underlying connection.
                pub fn inner(&self) -> &#cg::Client {
                    &self.inner
                }

                /// tonic's `with_interceptor`: the calls of this client pass `interceptor`
                /// before they go out (then the connection's own, if it has one); other
                /// clients of the connection do not see it.
                pub fn with_interceptor<F: #cg::ServiceInterceptor>(
                    inner: #cg::Channel,
                    interceptor: F,
                ) -> #client<#cg::InterceptedService<#cg::Channel, F>> {
                    #client {
                        inner: #cg::InterceptedService::new(inner, interceptor),
                    }
                }
            }

            impl<T: #cg::ClientChannel> #client<T> {
                #( #async_functions )*
            }

            impl ::core::convert::From<blocking::#client> for #client {
                /// The async client on the blocking one's connection.
                fn from(blocking: blocking::#client) -> Self {
                    Self::new(blocking.inner().clone())
                }
            }

            impl ::core::convert::From<#client> for blocking::#client {
                /// The blocking client on the async one's connection.
                fn from(client: #client) -> Self {
                    Self::new(client.inner)
                }
            }

            /// The blocking form of the client.
            pub mod blocking {
                #allow

                #blocking_docs
                #[derive(Debug, Clone)]
                pub struct #client {
                    inner: #cg::Client,
                }

                impl #client {
                    /// Wraps a connected client; several service clients can share one.
                    pub fn new(inner: #cg::Client) -> Self {
                        Self { inner }
                    }

                    /// Connects to `addr` with the default settings (see the async
                    /// client's `connect` for the forms it takes), blocking until connected.
                    pub fn connect(addr: &str) -> ::core::result::Result<Self, rpc_runtime::Error> {
                        let inner = #cg::Client::connect(addr)?;
                        ::core::result::Result::Ok(Self::new(inner))
                    }

                    /// The underlying connection.
                    pub fn inner(&self) -> &#cg::Client {
                        &self.inner
                    }

                    #( #blocking_functions )*
                }
            }

            #methods
        }
    }
}

/// The docs of a method, `lines` added after the proto's comments.
fn docs_with(method: &Method, lines: &[&str]) -> TokenStream {
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
}

/// The async client's function for `method` (the `index`th of the service). It takes
/// `&mut self`, as tonic's do (a tonic program's `let mut client` stays as it is); its
/// future holds a clone of the connection, not the borrow, so several calls may be in
/// flight from one client.
fn async_function(index: usize, method: &Method) -> TokenStream {
    let name = ident(&method.rust_name);
    let input = message_type(&method.input_type);
    let output = message_type(&method.output_type);
    let proto_name = &method.proto_name;
    let cg = quote!(rpc_runtime::codegen);
    let status = quote!(#cg::Status);
    match method.kind {
        MethodKind::Unary => {
            let docs = docs_with(
                method,
                &[
                    &format!(
                        "Calls `{proto_name}`: the future completes when the response arrives."
                    ),
                    "Await it from any executor, or `wait()` for it; dropping it first cancels the",
                    "call.",
                ],
            );
            quote! {
                #docs
                pub fn #name(
                    &mut self,
                    request: impl #cg::IntoRequest<#input>,
                ) -> #cg::ResponseFuture<#output, #input> {
                    #cg::ClientChannel::unary(
                        &mut self.inner,
                        &METHODS[#index],
                        <_ as #cg::IntoRequest<#input>>::into_request(request),
                    )
                }
            }
        }
        MethodKind::ServerStreaming => {
            let docs = docs_with(
                method,
                &[
                    &format!(
                        "Calls `{proto_name}`: resolves when the response headers arrive; the"
                    ),
                    "responses then come from the stream.",
                ],
            );
            quote! {
                #docs
                pub fn #name(
                    &mut self,
                    request: impl #cg::IntoRequest<#input>,
                ) -> impl ::core::future::Future<
                    Output = ::core::result::Result<#cg::Response<#cg::Streaming<#output>>, #status>,
                > {
                    let request = #cg::ClientChannel::intercept(
                        &mut self.inner,
                        <_ as #cg::IntoRequest<#input>>::into_request(request),
                    );
                    let inner = #cg::ClientChannel::channel(&self.inner).clone();
                    async move { inner.server_streaming_async(&METHODS[#index], request?).await }
                }
            }
        }
        MethodKind::ClientStreaming => {
            let docs = docs_with(
                method,
                &[
                    &format!("Calls `{proto_name}` with a `Stream` of requests (or a `Request` of"),
                    "one): the future pulls the stream while it is polled and resolves with the",
                    "response.",
                ],
            );
            quote! {
                #docs
                pub fn #name(
                    &mut self,
                    requests: impl #cg::IntoStreamingRequest<Message = #input>,
                ) -> impl ::core::future::Future<
                    Output = ::core::result::Result<#cg::Response<#output>, #status>,
                > {
                    let requests = #cg::ClientChannel::intercept(
                        &mut self.inner,
                        #cg::IntoStreamingRequest::into_streaming_request(requests),
                    );
                    let inner = #cg::ClientChannel::channel(&self.inner).clone();
                    async move { inner.client_streaming_async(&METHODS[#index], requests?).await }
                }
            }
        }
        MethodKind::BidiStreaming => {
            let docs = docs_with(method, &[
                &format!("Calls `{proto_name}` with a `Stream` of requests (or a `Request` of"),
                "one); resolves when the response headers arrive. The requests are pulled while",
                "this future or the response stream is polled: keep reading responses.",
            ]);
            quote! {
                #docs
                pub fn #name(
                    &mut self,
                    requests: impl #cg::IntoStreamingRequest<Message = #input>,
                ) -> impl ::core::future::Future<
                    Output = ::core::result::Result<#cg::Response<#cg::Streaming<#output>>, #status>,
                > {
                    let requests = #cg::ClientChannel::intercept(
                        &mut self.inner,
                        #cg::IntoStreamingRequest::into_streaming_request(requests),
                    );
                    let inner = #cg::ClientChannel::channel(&self.inner).clone();
                    async move { inner.bidi_streaming_async(&METHODS[#index], requests?).await }
                }
            }
        }
    }
}

/// [`message_type`] seen from the client module's `blocking` module, one level deeper.
fn blocking_message_type(rust_type: &str) -> syn::Type {
    let mut ty = message_type(rust_type);
    if let syn::Type::Path(type_path) = &mut ty {
        let segments = &mut type_path.path.segments;
        if segments.first().is_some_and(|s| s.ident == "super") {
            segments.insert(0, syn::PathSegment::from(ident("super")));
        }
    }
    ty
}

/// The blocking client's function for `method` (the `index`th of the service).
fn blocking_function(index: usize, method: &Method) -> TokenStream {
    let name = ident(&method.rust_name);
    let input = blocking_message_type(&method.input_type);
    let output = blocking_message_type(&method.output_type);
    let proto_name = &method.proto_name;
    let cg = quote!(rpc_runtime::codegen);
    let status = quote!(#cg::Status);
    let docs = method_docs(method, &format!("Calls `{proto_name}`."));
    // The method table is the client module's, one level up from `blocking`.
    let up = ident("super");
    let methods = quote!(#up::METHODS);
    match method.kind {
        MethodKind::Unary => quote! {
            #docs
            pub fn #name(
                &self,
                request: impl #cg::IntoRequest<#input>,
            ) -> ::core::result::Result<#cg::Response<#output>, #status> {
                self.inner.unary(
                    &#methods[#index],
                    <_ as #cg::IntoRequest<#input>>::into_request(request),
                )
            }
        },
        MethodKind::ServerStreaming => quote! {
            #docs
            ///
            /// Blocks until the response headers arrive; the responses then come from the
            /// stream (an iterator that blocks, or a `Stream`).
            pub fn #name(
                &self,
                request: impl #cg::IntoRequest<#input>,
            ) -> ::core::result::Result<#cg::Response<#cg::Streaming<#output>>, #status> {
                self.inner.server_streaming(
                    &#methods[#index],
                    <_ as #cg::IntoRequest<#input>>::into_request(request),
                )
            }
        },
        MethodKind::ClientStreaming => quote! {
            #docs
            ///
            /// Sends the requests (a `Vec`, an iterator, or a `Request` of one), then blocks
            /// for the response.
            pub fn #name(
                &self,
                requests: impl #cg::IntoIterRequest<Message = #input>,
            ) -> ::core::result::Result<#cg::Response<#output>, #status> {
                self.inner.client_streaming(
                    &#methods[#index],
                    #cg::IntoIterRequest::into_iter_request(requests),
                )
            }
        },
        MethodKind::BidiStreaming => quote! {
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
                    &#methods[#index],
                    <_ as #cg::IntoRequest<()>>::into_request(request),
                )
            }
        },
    }
}

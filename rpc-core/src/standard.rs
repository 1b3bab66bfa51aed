//! The standard services a server offers besides its own (unless
//! [`ServerBuilder::standard_services`](crate::ServerBuilder::standard_services) turns them
//! off), on every transport and on the gRPC face:
//!
//! - gRPC health checking (`grpc.health.v1.Health`): `Check` answers SERVING for the server
//!   (`""`) and for each of its services, NOT_FOUND for others; `Watch` sends the status and
//!   stays open until the server shuts down, then sends NOT_SERVING and ends.
//! - gRPC server reflection (`grpc.reflection.v1.ServerReflection`, and `v1alpha` for older
//!   tools): the list of services and the descriptors of their `.proto` files (which
//!   `rpc-codegen` embeds in the generated code), so tools such as grpcurl list, describe
//!   and call the services without the `.proto` files.
//!
//! The generated modules are public: [`health::health_client::HealthClient`] (async) and its
//! `blocking` form check another server's health.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

use crate::runtime::server::Service;
use crate::{Code, Request, Response, Status, Streaming};

/// gRPC health checking (`grpc.health.v1`).
#[allow(missing_docs)]
pub mod health {
    crate::include_proto!("grpc.health.v1");
}

/// gRPC server reflection (`grpc.reflection.v1`).
#[allow(missing_docs)]
pub mod reflection_v1 {
    crate::include_proto!("grpc.reflection.v1");
}

/// gRPC server reflection, the pre-release package many tools still use
/// (`grpc.reflection.v1alpha`, the same messages).
#[allow(missing_docs)]
pub mod reflection_v1alpha {
    crate::include_proto!("grpc.reflection.v1alpha");
}

use health::health_check_response::ServingStatus;
use health::{HealthCheckRequest, HealthCheckResponse};

/// The health service of a server with the services `names`.
pub(crate) struct HealthService {
    names: HashSet<String>,
    /// Becomes `true` when the server starts shutting down.
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Tells the standard services that the server is shutting down: health watches answer
/// NOT_SERVING and end, so they do not hold the shutdown up.
pub(crate) struct Stopping(tokio::sync::watch::Sender<bool>);

impl Stopping {
    pub(crate) fn announce(&self) {
        self.0.send_replace(true);
    }
}

impl HealthService {
    fn status_of(&self, service: &str) -> Option<ServingStatus> {
        (service.is_empty() || self.names.contains(service)).then_some(ServingStatus::Serving)
    }
}

impl health::health_server::Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        match self.status_of(service) {
            Some(status) => Ok(Response::new(HealthCheckResponse {
                status: status as i32,
            })),
            None => Err(Status::not_found(format!(
                "this server has no service {service:?}"
            ))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let status = self
            .status_of(&request.get_ref().service)
            .unwrap_or(ServingStatus::ServiceUnknown);
        // The statuses change only when the server shuts down: the status now, then
        // NOT_SERVING and the end when it does (or nothing until the client ends the call).
        let mut stopping = self.stopping.clone();
        Ok(Response::new(WatchStream {
            now: Some(status),
            stopped: Some(Box::pin(async move {
                let _ = stopping.wait_for(|stopping| *stopping).await;
            })),
        }))
    }
}

/// The answers of a health `Watch`: the status now, then NOT_SERVING once the server
/// shuts down, then the end.
pub struct WatchStream {
    now: Option<ServingStatus>,
    stopped: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl futures_core::Stream for WatchStream {
    type Item = Result<HealthCheckResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let answer = |status: ServingStatus| {
            Poll::Ready(Some(Ok(HealthCheckResponse {
                status: status as i32,
            })))
        };
        if let Some(status) = this.now.take() {
            return answer(status);
        }
        match this.stopped.as_mut().map(|s| s.as_mut().poll(cx)) {
            None => Poll::Ready(None),
            Some(Poll::Pending) => Poll::Pending,
            Some(Poll::Ready(())) => {
                this.stopped = None;
                answer(ServingStatus::NotServing)
            }
        }
    }
}

/// What reflection knows: the files of the services' descriptor sets and their symbols.
#[derive(Default)]
struct Index {
    services: Vec<String>,
    /// File name → (encoded `FileDescriptorProto`, the files it imports).
    files: HashMap<String, (Vec<u8>, Vec<String>)>,
    /// Fully qualified symbol → the file defining it.
    symbols: HashMap<String, String>,
}

impl Index {
    fn new(services: &[Arc<dyn Service>]) -> Index {
        let mut index = Index::default();
        for service in services {
            index.services.push(service.descriptor().name.to_string());
            let set = match FileDescriptorSet::decode(service.file_descriptor_set()) {
                Ok(set) => set,
                Err(e) => {
                    tracing::warn!(service = service.descriptor().name, error = %e,
                        "undecodable descriptor set: reflection will not describe this service");
                    continue;
                }
            };
            for file in set.file {
                let name = file.name().to_string();
                if index.files.contains_key(&name) {
                    continue;
                }
                let package = file.package();
                let prefix = if package.is_empty() {
                    String::new()
                } else {
                    format!("{package}.")
                };
                let mut symbols = Vec::new();
                for service in &file.service {
                    let full = format!("{prefix}{}", service.name());
                    for method in &service.method {
                        symbols.push(format!("{full}.{}", method.name()));
                    }
                    symbols.push(full);
                }
                collect_types(&prefix, &file.message_type, &file.enum_type, &mut symbols);
                for symbol in symbols {
                    index.symbols.entry(symbol).or_insert_with(|| name.clone());
                }
                index
                    .files
                    .insert(name, (file.encode_to_vec(), file.dependency.clone()));
            }
        }
        index.services.sort();
        index.services.dedup();
        index
    }

    /// The file `name` and everything it imports, the file first.
    fn file_with_imports(&self, name: &str) -> Result<Vec<Vec<u8>>, Status> {
        if !self.files.contains_key(name) {
            return Err(Status::not_found(format!("no file {name:?}")));
        }
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut todo = vec![name.to_string()];
        while let Some(next) = todo.pop() {
            if !seen.insert(next.clone()) {
                continue;
            }
            if let Some((bytes, imports)) = self.files.get(&next) {
                out.push(bytes.clone());
                todo.extend(imports.iter().cloned());
            }
        }
        Ok(out)
    }

    fn file_of_symbol(&self, symbol: &str) -> Result<Vec<Vec<u8>>, Status> {
        let symbol = symbol.strip_prefix('.').unwrap_or(symbol);
        match self.symbols.get(symbol) {
            Some(file) => self.file_with_imports(file),
            None => Err(Status::not_found(format!("no symbol {symbol:?}"))),
        }
    }
}

/// The fully qualified names of messages and enums, nested ones included.
fn collect_types(
    prefix: &str,
    messages: &[DescriptorProto],
    enums: &[EnumDescriptorProto],
    out: &mut Vec<String>,
) {
    for e in enums {
        out.push(format!("{prefix}{}", e.name()));
    }
    for m in messages {
        let full = format!("{prefix}{}", m.name());
        collect_types(&format!("{full}."), &m.nested_type, &m.enum_type, out);
        out.push(full);
    }
}

/// Server reflection over `index`, one implementation for both packages (their messages
/// are the same).
macro_rules! reflection_service {
    ($name:ident, $package:ident) => {
        /// Server reflection (the package of the module it serves).
        pub(crate) struct $name {
            index: Arc<Index>,
        }

        impl $package::server_reflection_server::ServerReflection for $name {
            type ServerReflectionInfoStream = Answers<
                $package::ServerReflectionRequest,
                Result<$package::ServerReflectionResponse, Status>,
            >;

            async fn server_reflection_info(
                &self,
                request: Request<Streaming<$package::ServerReflectionRequest>>,
            ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
                let index = Arc::clone(&self.index);
                let answer = move |request: $package::ServerReflectionRequest| {
                    use $package::server_reflection_request::MessageRequest as Ask;
                    use $package::server_reflection_response::MessageResponse as Answer;
                    let files = |found: Result<Vec<Vec<u8>>, Status>| match found {
                        Ok(files) => {
                            Answer::FileDescriptorResponse($package::FileDescriptorResponse {
                                file_descriptor_proto: files,
                            })
                        }
                        Err(status) => Answer::ErrorResponse($package::ErrorResponse {
                            error_code: status.code() as i32,
                            error_message: status.message().to_string(),
                        }),
                    };
                    let unsupported = |what: &str| {
                        Answer::ErrorResponse($package::ErrorResponse {
                            error_code: Code::NotFound as i32,
                            error_message: format!(
                                "{what}: this server's services define no extensions"
                            ),
                        })
                    };
                    let answer = match &request.message_request {
                        Some(Ask::ListServices(_)) => {
                            Answer::ListServicesResponse($package::ListServiceResponse {
                                service: index
                                    .services
                                    .iter()
                                    .map(|name| $package::ServiceResponse { name: name.clone() })
                                    .collect(),
                            })
                        }
                        Some(Ask::FileByFilename(name)) => files(index.file_with_imports(name)),
                        Some(Ask::FileContainingSymbol(symbol)) => {
                            files(index.file_of_symbol(symbol))
                        }
                        Some(Ask::FileContainingExtension(e)) => unsupported(&e.containing_type),
                        Some(Ask::AllExtensionNumbersOfType(t)) => unsupported(t),
                        None => Answer::ErrorResponse($package::ErrorResponse {
                            error_code: Code::InvalidArgument as i32,
                            error_message: "the request asks for nothing".to_string(),
                        }),
                    };
                    Ok($package::ServerReflectionResponse {
                        valid_host: request.host.clone(),
                        original_request: Some(request),
                        message_response: Some(answer),
                    })
                };
                Ok(Response::new(Answers {
                    requests: request.into_inner(),
                    answer: Box::new(answer),
                }))
            }
        }
    };
}

reflection_service!(ReflectionV1, reflection_v1);
reflection_service!(ReflectionV1Alpha, reflection_v1alpha);

/// One answer per request of a request stream.
pub struct Answers<Req, Resp> {
    requests: Streaming<Req>,
    answer: Box<dyn Fn(Req) -> Resp + Send + Sync>,
}

impl<Req: Message + Default, Resp> futures_core::Stream for Answers<Req, Resp> {
    type Item = Resp;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Resp>> {
        let this = self.get_mut();
        match this.requests.poll_message(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(request))) => Poll::Ready(Some((this.answer)(request))),
            // The client ended its requests, or the call is over: so are the answers.
            Poll::Ready(Ok(None)) | Poll::Ready(Err(_)) => Poll::Ready(None),
        }
    }
}

/// The standard services for a server whose own services are `services`, and the handle
/// that tells them of the server's shutdown.
pub(crate) fn services(services: &[Arc<dyn Service>]) -> (Vec<Arc<dyn Service>>, Stopping) {
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let health: Arc<dyn Service> =
        Arc::new(health::health_server::HealthServer::new(HealthService {
            names: HashSet::new(),
            stopping: stopping.clone(),
        }));
    let v1: Arc<dyn Service> = Arc::new(
        reflection_v1::server_reflection_server::ServerReflectionServer::new(ReflectionV1 {
            index: Arc::new(Index::default()),
        }),
    );
    let v1alpha: Arc<dyn Service> = Arc::new(
        reflection_v1alpha::server_reflection_server::ServerReflectionServer::new(
            ReflectionV1Alpha {
                index: Arc::new(Index::default()),
            },
        ),
    );
    // Everything is listed and described: the server's services and the standard ones.
    let mut all: Vec<Arc<dyn Service>> = services.to_vec();
    all.extend([Arc::clone(&health), Arc::clone(&v1), Arc::clone(&v1alpha)]);
    let index = Arc::new(Index::new(&all));
    let names = index.services.iter().cloned().collect();
    let standard: Vec<Arc<dyn Service>> = vec![
        Arc::new(health::health_server::HealthServer::new(HealthService {
            names,
            stopping,
        })),
        Arc::new(
            reflection_v1::server_reflection_server::ServerReflectionServer::new(ReflectionV1 {
                index: Arc::clone(&index),
            }),
        ),
        Arc::new(
            reflection_v1alpha::server_reflection_server::ServerReflectionServer::new(
                ReflectionV1Alpha { index },
            ),
        ),
    ];
    (standard, Stopping(stopping_tx))
}

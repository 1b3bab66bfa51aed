//! tonic-health's API over rpc-core, so that a ported tonic service keeps its health
//! reporting: depend on this crate under tonic-health's name
//! (`tonic-health = { package = "rpc-health", .. }`) and `tonic_health::server::health_reporter()`
//! compiles and works unchanged.
//!
//! A server of rpc-core answers `grpc.health.v1.Health` by itself (SERVING for every service
//! it has, [`rpc_core::standard`]). The service made here replaces that one when added to the
//! server, and answers what its [`server::HealthReporter`] sets instead.
//!
//! ```no_run
//! # async fn run() -> Result<(), rpc_core::Error> {
//! use rpc_core::transport::Server;
//! # use rpc_core::server::NamedService;
//! # struct GreeterServer;
//! # impl NamedService for GreeterServer { const NAME: &'static str = "helloworld.Greeter"; }
//!
//! let (reporter, health_service) = rpc_health::server::health_reporter();
//! reporter.set_serving::<GreeterServer>().await;
//! let server = Server::builder().add_service(health_service);
//! // ... .add_service(GreeterServer::new(greeter)).serve(addr).await?
//! # let _ = server; Ok(()) }
//! ```

/// The generated `grpc.health.v1` messages, client and server (tonic-health's `pb`).
pub use rpc_core::standard::health as pb;

/// A service's health, as a [`server::HealthReporter`] sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServingStatus {
    /// Not known (answered as UNKNOWN).
    Unknown,
    /// Serving requests.
    Serving,
    /// Not serving requests.
    NotServing,
}

impl From<ServingStatus> for pb::health_check_response::ServingStatus {
    fn from(status: ServingStatus) -> Self {
        match status {
            ServingStatus::Unknown => Self::Unknown,
            ServingStatus::Serving => Self::Serving,
            ServingStatus::NotServing => Self::NotServing,
        }
    }
}

/// The health service and the reporter that sets what it answers.
pub mod server {
    use std::collections::HashMap;
    use std::sync::Arc;

    use rpc_core::server::NamedService;
    use rpc_core::{Request, Response, Status};
    use rpc_sync::RwLock;
    use tokio::sync::watch;
    use tokio_stream::wrappers::WatchStream;
    use tokio_stream::StreamExt;

    use super::pb::health_check_response::ServingStatus as WireStatus;
    use super::pb::health_server::{Health, HealthServer};
    use super::pb::{HealthCheckRequest, HealthCheckResponse};
    use super::ServingStatus;

    /// The statuses by service name, each a watch its Watch calls follow.
    type Statuses = Arc<RwLock<HashMap<String, watch::Sender<ServingStatus>>>>;

    /// A [`HealthReporter`] and the health service that answers what it sets (the server
    /// itself, `""`, starts SERVING).
    pub fn health_reporter() -> (HealthReporter, HealthServer<impl Health>) {
        let reporter = HealthReporter::new();
        let service = HealthService::from_health_reporter(reporter.clone());
        (reporter, HealthServer::new(service))
    }

    /// Sets the status a [`HealthService`] answers for each service; cheap to clone (the
    /// clones share the statuses).
    #[derive(Debug, Clone)]
    pub struct HealthReporter {
        statuses: Statuses,
    }

    impl Default for HealthReporter {
        fn default() -> Self {
            HealthReporter::new()
        }
    }

    impl HealthReporter {
        /// A reporter whose only service is the server itself (`""`), SERVING.
        pub fn new() -> HealthReporter {
            let (serving, _) = watch::channel(ServingStatus::Serving);
            let statuses = HashMap::from([(String::new(), serving)]);
            HealthReporter {
                statuses: Arc::new(RwLock::new(statuses)),
            }
        }

        /// The service `S` (a generated server) is SERVING.
        pub async fn set_serving<S: NamedService>(&self) {
            self.set_service_status(S::NAME, ServingStatus::Serving)
                .await;
        }

        /// The service `S` (a generated server) is NOT_SERVING.
        pub async fn set_not_serving<S: NamedService>(&self) {
            self.set_service_status(S::NAME, ServingStatus::NotServing)
                .await;
        }

        /// The service `service_name` (`package.Service`, or `""` for the server) has
        /// `status`; its watchers hear of a change.
        pub async fn set_service_status<S: AsRef<str>>(
            &self,
            service_name: S,
            status: ServingStatus,
        ) {
            let name = service_name.as_ref();
            let mut statuses = self.statuses.write();
            match statuses.get(name) {
                Some(sender) => {
                    sender.send_if_modified(|now| std::mem::replace(now, status) != status);
                }
                None => {
                    statuses.insert(name.to_string(), watch::channel(status).0);
                }
            }
        }

        /// Forgets `service_name`: checks of it then answer NOT_FOUND, and its watchers hear
        /// SERVICE_UNKNOWN.
        pub async fn clear_service_status(&mut self, service_name: &str) {
            let removed = self.statuses.write().remove(service_name);
            // Dropping the sender ends the watchers' streams, which then say SERVICE_UNKNOWN.
            drop(removed);
        }

        fn status(&self, service_name: &str) -> Option<ServingStatus> {
            self.statuses.read().get(service_name).map(|s| *s.borrow())
        }

        fn watch(&self, service_name: &str) -> Option<watch::Receiver<ServingStatus>> {
            self.statuses
                .read()
                .get(service_name)
                .map(watch::Sender::subscribe)
        }
    }

    /// The `grpc.health.v1.Health` service answering what a [`HealthReporter`] sets: Check
    /// gives a known service's status and NOT_FOUND for others; Watch sends the status now
    /// and each change until the client ends the call, and SERVICE_UNKNOWN for a service not
    /// known when the call starts or once it is forgotten (later statuses of a service set
    /// again reach new Watch calls only). A Watch lasts until its client ends it, as
    /// tonic-health's does: open ones hold a graceful shutdown up for its grace period.
    #[derive(Debug, Clone)]
    pub struct HealthService {
        reporter: HealthReporter,
    }

    impl HealthService {
        /// The service that answers what `reporter` sets.
        pub fn from_health_reporter(reporter: HealthReporter) -> HealthService {
            HealthService { reporter }
        }
    }

    /// The answers of a Watch call.
    pub type WatchAnswers = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<HealthCheckResponse, Status>> + Send>,
    >;

    fn answer(status: WireStatus) -> HealthCheckResponse {
        HealthCheckResponse {
            status: status as i32,
        }
    }

    impl Health for HealthService {
        async fn check(
            &self,
            request: Request<HealthCheckRequest>,
        ) -> Result<Response<HealthCheckResponse>, Status> {
            let service = &request.get_ref().service;
            match self.reporter.status(service) {
                Some(status) => Ok(Response::new(answer(status.into()))),
                None => Err(Status::not_found(format!("unknown service {service:?}"))),
            }
        }

        type WatchStream = WatchAnswers;

        async fn watch(
            &self,
            request: Request<HealthCheckRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            let unknown = || answer(WireStatus::ServiceUnknown);
            let answers: WatchAnswers = match self.reporter.watch(&request.get_ref().service) {
                // Each status as it changes; SERVICE_UNKNOWN once the service is forgotten,
                // and then nothing more until the client ends the call.
                Some(receiver) => Box::pin(
                    WatchStream::new(receiver)
                        .map(|status| Ok(answer(status.into())))
                        .chain(tokio_stream::once(Ok(unknown())))
                        .chain(tokio_stream::pending()),
                ),
                None => Box::pin(tokio_stream::once(Ok(unknown())).chain(tokio_stream::pending())),
            };
            Ok(Response::new(answers))
        }
    }
}

//! Routing a request to its service's handler: inline or on the worker pool, after the
//! interceptor, with the call counted until its [`ReplySink`] goes.

use foldhash::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::handler::{run_handler, Calls, IncomingRequest, Job, ReplySink, Requests, Service};
use crate::interceptor::SharedInterceptor;
use crate::request::Extras;
use crate::runtime::call::{RequestBody, RequestDelivery};
use crate::runtime::pool::WorkerPool;
use crate::runtime::port::Dispatch;
use crate::runtime::port::Port;
use crate::runtime::service::{MethodDescriptor, ServedMethod};
use crate::Status;

/// Where a method's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// On the poller thread: lowest latency, for handlers that return in microseconds and
    /// never block. An async handler's task woken by what this server's poller received
    /// (the credits or window its response stream waited for, its next request message)
    /// resumes on that poller too; woken from anywhere else (a timer, another call), it
    /// resumes on the worker pool. A blocking handler of a streaming method (generated with
    /// `sync_handlers`) runs on the worker pool even so: it waits for its peer's window or
    /// next request, which only the poller it would occupy could receive.
    Inline,
    /// On the worker pool (default): a slow handler does not stall the poller.
    WorkerPool,
}

pub(super) struct Route {
    pub(super) service: Arc<dyn Service>,
    pub(super) index: usize,
    pub(super) method: &'static MethodDescriptor,
    pub(super) execution: Execution,
    /// Whether the server's interceptor sees this method's calls (not the standard
    /// services', unless asked).
    pub(super) intercepted: bool,
}

/// What the poller, the gRPC face and the handlers share.
pub(crate) struct Shared {
    /// Every method's route, at the index its [`ServedMethod`] names.
    pub(super) routes: Vec<Route>,
    /// The methods by wire id (looked up once per connection and method).
    pub(super) ids: HashMap<u32, ServedMethod>,
    /// The methods by path, for the gRPC face.
    pub(super) paths: HashMap<&'static str, ServedMethod>,
    pub(super) interceptor: Option<SharedInterceptor>,
    pub(super) pool: WorkerPool<Job>,
    pub(super) calls: Arc<Calls>,
}

impl Dispatch for Shared {
    fn method(&self, id: u32) -> Option<ServedMethod> {
        self.ids.get(&id).copied()
    }

    fn lookup(&self, path: &str) -> Option<ServedMethod> {
        self.paths.get(path).copied()
    }

    fn serve(&self, port: Port, peer: Arc<str>, delivery: RequestDelivery) {
        self.serve_request(port, peer, delivery);
    }
}

impl Shared {
    /// Runs (or queues) the handler of a request that arrived on `port` from `peer`.
    fn serve_request(&self, port: Port, peer: Arc<str>, delivery: RequestDelivery) {
        let counters = &self.calls.counters;
        counters.call();
        let RequestDelivery {
            call,
            method,
            deadline,
            deadline_fresh,
            metadata,
            body,
            stream,
        } = delivery;
        let refuse = |status: Status| {
            counters.error();
            port.end(call, status);
        };
        // By index: `method` came from this dispatch, so its route is there.
        let Some(route) = self.routes.get(method.route as usize) else {
            drop(body);
            refuse(Status::unimplemented(format!(
                "no service on this server has a method with id {:#010x}",
                method.id
            )));
            return;
        };
        if !deadline_fresh && deadline.is_some_and(|d| d <= Instant::now()) {
            drop(body);
            refuse(Status::deadline_exceeded(
                "deadline passed before the handler ran",
            ));
            return;
        }
        let interceptor = self.interceptor.as_ref().filter(|_| route.intercepted);
        let (metadata, extensions) = match interceptor {
            None => (metadata, Extras::none()),
            Some(interceptor) => match interceptor.apply_incoming(metadata, deadline, &peer) {
                Ok(parts) => parts,
                Err(status) => {
                    drop(body);
                    refuse(status);
                    return;
                }
            },
        };
        self.calls.in_flight.add(1);
        let body = match body {
            RequestBody::Message(payload) => Requests::Message(payload),
            RequestBody::Stream => Requests::Stream(
                Arc::clone(
                    stream
                        .as_ref()
                        .expect("a stream body comes with its stream"),
                ),
                port.clone(),
            ),
        };
        let request = IncomingRequest {
            body,
            method: route.method,
            deadline,
            metadata,
            peer,
            extensions,
        };
        let reply = ReplySink {
            port,
            id: call,
            method: route.method,
            calls: Arc::clone(&self.calls),
            stream,
            done: false,
            inline: route.execution == Execution::Inline,
        };
        match route.execution {
            Execution::Inline => run_handler(&*route.service, route.index, request, reply),
            Execution::WorkerPool => {
                let job = Job {
                    service: Arc::clone(&route.service),
                    index: route.index,
                    request,
                    reply,
                };
                if let Some(job) = self.pool.execute(job) {
                    // The queue is full: answer at once rather than queue without bound.
                    drop(job.request);
                    job.reply.fail(Status::unavailable(
                        "the server is overloaded: its handler queue is full",
                    ));
                }
            }
        }
    }
}

//! [`PortFace`]: standard gRPC on the server's own TCP port. The TCP transport tells an
//! HTTP/2 client (its 24-byte connection preface) from one of this protocol (a HELLO, `RP`)
//! by the first bytes it sends, and hands the former over here, as it does a client whose
//! first byte begins a TLS handshake (gRPC over TLS, served if the server has TLS); the gRPC
//! face that serves them starts with the first one, so a server that never sees one runs no
//! HTTP/2 machinery.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rpc_sync::{Flag, Mutex};

use crate::runtime::grpc::server::{FaceSettings, GrpcFace};
use crate::runtime::port::Dispatch;

/// The face of a server's own port, started on its first HTTP/2 connection.
pub(super) struct PortFace {
    /// The server's dispatch, set once the server is built (connections handed over before
    /// that are closed).
    dispatch: OnceLock<Arc<dyn Dispatch>>,
    /// The face's settings (TLS for the clients that begin with a TLS handshake:
    /// `ServerBuilder::grpc_tls`).
    settings: FaceSettings,
    face: Mutex<Option<GrpcFace>>,
    /// Raised when the server shuts down: a connection handed over later is closed, and no
    /// face starts again.
    closed: Flag,
}

impl PortFace {
    pub(super) fn new(settings: FaceSettings) -> Arc<PortFace> {
        Arc::new(PortFace {
            dispatch: OnceLock::new(),
            settings,
            face: Mutex::new(None),
            closed: Flag::new(false),
        })
    }

    /// The server's dispatch, once it exists.
    pub(super) fn set_dispatch(&self, dispatch: Arc<dyn Dispatch>) {
        let _ = self.dispatch.set(dispatch);
    }

    /// Serves an HTTP/2 connection the TCP transport accepted, starting the face on the
    /// first (on the transport's I/O thread, once).
    pub(super) fn hand_off(&self, stream: std::net::TcpStream) {
        let Some(dispatch) = self.dispatch.get() else {
            return;
        };
        let mut face = self.face.lock();
        // Checked under the lock that `shutdown` takes the face under: a face started here
        // is one `shutdown` finds.
        if self.closed.is_raised() {
            return;
        }
        if face.is_none() {
            match GrpcFace::start(Arc::clone(dispatch), None, self.settings.clone()) {
                Ok(started) => *face = Some(started),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot serve gRPC on the server's port");
                    return;
                }
            }
        }
        if let Some(face) = face.as_ref() {
            face.hand_off(stream);
        }
    }

    /// Refuses connections handed over from now on (the server is shutting down).
    pub(super) fn close(&self) {
        self.closed.raise();
    }

    /// Stops the face, if it started, as [`GrpcFace::shutdown`] does; closes first.
    pub(super) fn shutdown(&self, grace: Duration) {
        self.close();
        let face = self.face.lock().take();
        if let Some(mut face) = face {
            face.shutdown(grace);
        }
    }
}

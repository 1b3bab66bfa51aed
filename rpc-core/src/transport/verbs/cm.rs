//! rdma_cm objects: event channels, connection ids, and events copied out of librdmacm.
//!
//! Every event is copied into a [`CmEvent`] and acknowledged (`rdma_ack_cm_event`) right away:
//! `rdma_destroy_id` blocks until all events of its id have been acknowledged, so holding one
//! while other code might drop the id's owner would deadlock.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use rdma_sys::{
    ibv_context, rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_cm_event, rdma_cm_event_type,
    rdma_cm_id, rdma_conn_param, rdma_connect, rdma_create_event_channel, rdma_create_id,
    rdma_destroy_event_channel, rdma_destroy_id, rdma_disconnect, rdma_event_channel,
    rdma_event_str, rdma_get_cm_event, rdma_get_dst_port, rdma_get_src_port, rdma_listen,
    rdma_migrate_id, rdma_port_space, rdma_reject, rdma_resolve_addr, rdma_resolve_route,
};
use rpc_sync::{Flag, Mutex};

use super::sys::{
    c_string, errno_error, os_error, poll_readable, remaining, set_nonblocking, socket_addr_from_c,
    CSockAddr,
};
use crate::Error;

/// An rdma_cm event channel (a file descriptor librdmacm reads events from), non-blocking.
pub(super) struct EventChannel {
    raw: NonNull<rdma_event_channel>,
}

// SAFETY: the channel is a descriptor plus a malloc'ed struct; librdmacm calls on it are
// thread-safe, and we only read `fd`.
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    pub(super) fn new() -> Result<Arc<EventChannel>, Error> {
        // SAFETY: no arguments; returns an owned channel or NULL with errno set.
        let raw = unsafe { rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| errno_error("rdma_create_event_channel"))?;
        let channel = Arc::new(EventChannel { raw });
        set_nonblocking(channel.fd()).map_err(|e| os_error("fcntl(O_NONBLOCK)", e))?;
        Ok(channel)
    }

    pub(super) fn fd(&self) -> RawFd {
        // SAFETY: `raw` is a live channel; `fd` is a plain field set at creation.
        unsafe { self.raw.as_ref() }.fd
    }

    fn raw(&self) -> *mut rdma_event_channel {
        self.raw.as_ptr()
    }

    /// Reads one event without blocking: `Ok(None)` when none is queued. `key` runs before the
    /// event is acknowledged, while its id cannot be destroyed, with the id's address.
    /// A CONNECT_REQUEST's new id is returned owned, in [`CmEvent::new_id`].
    pub(super) fn try_get<K>(
        self: &Arc<Self>,
        key: impl FnOnce(usize) -> K,
    ) -> Result<Option<(CmEvent, K)>, Error> {
        let mut event: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; on success `event` points to an event
        // that we own until rdma_ack_cm_event.
        let ret = unsafe { rdma_get_cm_event(self.raw(), &mut event) };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(os_error("rdma_get_cm_event", err));
        }
        // SAFETY: rdma_get_cm_event succeeded, so `event` is valid until acknowledged.
        let ev = unsafe { &*event };
        let kind = ev.event;
        let id_addr = ev.id as usize;
        let private_data = match kind {
            rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST
            | rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED
            | rdma_cm_event_type::RDMA_CM_EVENT_REJECTED
            | rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED => {
                // SAFETY: connection events on RC ids carry `param.conn`; librdmacm points
                // `private_data` at `private_data_len` bytes inside the event (or NULL).
                let conn = unsafe { &ev.param.conn };
                if conn.private_data.is_null() || conn.private_data_len == 0 {
                    Vec::new()
                } else {
                    // SAFETY: as above: a valid buffer of that length while unacknowledged.
                    unsafe {
                        std::slice::from_raw_parts(
                            conn.private_data.cast::<u8>(),
                            usize::from(conn.private_data_len),
                        )
                    }
                    .to_vec()
                }
            }
            _ => Vec::new(),
        };
        let new_id = if kind == rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
            NonNull::new(ev.id).map(|raw| CmId::from_raw(raw, self.clone()))
        } else {
            None
        };
        let cm_event = CmEvent {
            kind,
            status: ev.status,
            id_addr,
            private_data,
            new_id,
        };
        let key = key(id_addr);
        // SAFETY: acknowledges the event obtained above exactly once; we keep no pointer into
        // it (the private data was copied).
        unsafe { rdma_ack_cm_event(event) };
        Ok(Some((cm_event, key)))
    }

    /// Waits for the next event until `deadline`; `Ok(None)` when it passed.
    pub(super) fn get_until(self: &Arc<Self>, deadline: Instant) -> Result<Option<CmEvent>, Error> {
        loop {
            if let Some((event, ())) = self.try_get(|_| ())? {
                return Ok(Some(event));
            }
            let left = remaining(deadline);
            if left.is_zero() {
                return Ok(None);
            }
            poll_readable(&[self.fd()], Some(left)).map_err(|e| os_error("poll", e))?;
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id created on or migrated to this channel holds an Arc of it, so none
        // is left; the channel is destroyed once.
        unsafe { rdma_destroy_event_channel(self.raw()) };
    }
}

/// A copied, already acknowledged rdma_cm event.
pub(super) struct CmEvent {
    pub(super) kind: rdma_cm_event_type::Type,
    pub(super) status: i32,
    /// Address of the id the event is for (identity only; never dereferenced).
    pub(super) id_addr: usize,
    pub(super) private_data: Vec<u8>,
    /// The new id of a CONNECT_REQUEST, owned.
    pub(super) new_id: Option<CmId>,
}

impl CmEvent {
    pub(super) fn name(&self) -> String {
        event_name(self.kind)
    }

    /// "EVENT (status N)" for error messages.
    pub(super) fn describe(&self) -> String {
        if self.status == 0 {
            self.name()
        } else {
            let status = if self.status < 0 {
                std::io::Error::from_raw_os_error(-self.status).to_string()
            } else {
                format!("status {}", self.status)
            };
            format!("{} ({status})", self.name())
        }
    }
}

pub(super) fn event_name(kind: rdma_cm_event_type::Type) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    unsafe { c_string(rdma_event_str(kind)) }
}

/// An rdma_cm connection id (`RDMA_PS_TCP`, RC), destroyed in Drop.
pub(super) struct CmId {
    raw: NonNull<rdma_cm_id>,
    /// The channel the id reports events on; it must outlive the id. Replaced by `migrate`.
    channel: Mutex<Arc<EventChannel>>,
    disconnected: Flag,
}

// SAFETY: librdmacm calls on one id may be made from any thread. The calls that must not race
// with each other are serialized by construction: setup calls (bind, resolve, connect, accept,
// migrate) happen in the one thread that owns the id before it is shared, `disconnect` runs at
// most once (guarded by `disconnected`), and destroy runs in Drop, with exclusive access.
unsafe impl Send for CmId {}
// SAFETY: as above; the fields we read after setup (verbs, port_num, addresses) no longer
// change.
unsafe impl Sync for CmId {}

impl CmId {
    pub(super) fn new(channel: &Arc<EventChannel>) -> Result<CmId, Error> {
        let mut raw: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `raw` is a valid out-parameter; RDMA_PS_TCP gives an
        // RC id.
        let ret = unsafe {
            rdma_create_id(
                channel.raw(),
                &mut raw,
                std::ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if ret != 0 {
            return Err(errno_error("rdma_create_id"));
        }
        let raw = NonNull::new(raw).ok_or_else(|| errno_error("rdma_create_id"))?;
        Ok(CmId::from_raw(raw, channel.clone()))
    }

    fn from_raw(raw: NonNull<rdma_cm_id>, channel: Arc<EventChannel>) -> CmId {
        CmId {
            raw,
            channel: Mutex::new(channel),
            disconnected: Flag::new(false),
        }
    }

    pub(super) fn raw(&self) -> *mut rdma_cm_id {
        self.raw.as_ptr()
    }

    pub(super) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// The device context the id is bound to (null before bind/resolve, or for a wildcard
    /// listener).
    pub(super) fn verbs(&self) -> *mut ibv_context {
        // SAFETY: the id is live; `verbs` is set by librdmacm during bind/resolve, which
        // happen in the owning thread before this is read.
        unsafe { self.raw.as_ref() }.verbs
    }

    pub(super) fn port_num(&self) -> u8 {
        // SAFETY: as for `verbs`.
        unsafe { self.raw.as_ref() }.port_num
    }

    pub(super) fn bind(&self, addr: SocketAddr) -> Result<(), std::io::Error> {
        let mut c = CSockAddr::new(addr);
        // SAFETY: the id is live; the address is valid for the call and not kept.
        let ret = unsafe { rdma_bind_addr(self.raw(), c.as_mut_ptr()) };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    pub(super) fn resolve_addr(&self, dst: SocketAddr, timeout_ms: i32) -> Result<(), Error> {
        let mut c = CSockAddr::new(dst);
        // SAFETY: the id is live; the destination address is copied by librdmacm.
        let ret = unsafe {
            rdma_resolve_addr(self.raw(), std::ptr::null_mut(), c.as_mut_ptr(), timeout_ms)
        };
        if ret != 0 {
            return Err(errno_error("rdma_resolve_addr"));
        }
        Ok(())
    }

    pub(super) fn resolve_route(&self, timeout_ms: i32) -> Result<(), Error> {
        // SAFETY: the id is live and its address resolved.
        let ret = unsafe { rdma_resolve_route(self.raw(), timeout_ms) };
        if ret != 0 {
            return Err(errno_error("rdma_resolve_route"));
        }
        Ok(())
    }

    pub(super) fn listen(&self, backlog: i32) -> Result<(), Error> {
        // SAFETY: the id is live and bound.
        let ret = unsafe { rdma_listen(self.raw(), backlog) };
        if ret != 0 {
            return Err(errno_error("rdma_listen"));
        }
        Ok(())
    }

    pub(super) fn connect(&self, param: &ConnParam) -> Result<(), Error> {
        let mut p = param.raw();
        // SAFETY: the id is live with a route and a QP; `p` and the private data it points to
        // (borrowed from `param`) are valid for the call, which copies them.
        let ret = unsafe { rdma_connect(self.raw(), &mut p) };
        if ret != 0 {
            return Err(errno_error("rdma_connect"));
        }
        Ok(())
    }

    pub(super) fn accept(&self, param: &ConnParam) -> Result<(), Error> {
        let mut p = param.raw();
        // SAFETY: as for connect; the id is a CONNECT_REQUEST's id with a QP.
        let ret = unsafe { rdma_accept(self.raw(), &mut p) };
        if ret != 0 {
            return Err(errno_error("rdma_accept"));
        }
        Ok(())
    }

    pub(super) fn reject(&self) {
        // SAFETY: the id is a CONNECT_REQUEST's id; no private data is passed.
        let ret = unsafe { rdma_reject(self.raw(), std::ptr::null(), 0) };
        if ret != 0 {
            tracing::debug!(error = %errno_error("rdma_reject"), "verbs: reject failed");
        }
    }

    /// Disconnects once: librdmacm moves the QP to the error state (so every outstanding work
    /// request is flushed) and sends a DREQ (or the DREP to a peer's DREQ). Returns whether
    /// this call did it.
    pub(super) fn disconnect(&self) -> bool {
        if !self.disconnected.raise() {
            return false;
        }
        // SAFETY: the id is live; `disconnected` makes this the only disconnect call.
        let ret = unsafe { rdma_disconnect(self.raw()) };
        if ret != 0 {
            tracing::debug!(error = %errno_error("rdma_disconnect"), "verbs: disconnect failed");
        }
        true
    }

    /// Moves the id's future events to `channel`.
    pub(super) fn migrate(&self, channel: &Arc<EventChannel>) -> Result<(), Error> {
        let mut current = self.channel.lock();
        // SAFETY: the id and both channels are live; all events of the id delivered so far
        // have been acknowledged (try_get acknowledges at once), so librdmacm does not wait.
        let ret = unsafe { rdma_migrate_id(self.raw(), channel.raw()) };
        if ret != 0 {
            return Err(errno_error("rdma_migrate_id"));
        }
        *current = channel.clone();
        Ok(())
    }

    /// The local address (after bind or resolve).
    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; librdmacm stores the source address inside the id and
        // rdma_get_src_port reads the port from it.
        unsafe {
            let id = self.raw.as_ref();
            let sa: *const libc::sockaddr = &id.route.addr.src_addr_union.src_addr;
            let mut addr = socket_addr_from_c(sa)?;
            addr.set_port(u16::from_be(rdma_get_src_port(self.raw())));
            Some(addr)
        }
    }

    /// The peer's address (after resolve or a connect request).
    pub(super) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as for local_addr, with the destination address.
        unsafe {
            let id = self.raw.as_ref();
            let sa: *const libc::sockaddr = &id.route.addr.dst_addr_union.dst_addr;
            let mut addr = socket_addr_from_c(sa)?;
            addr.set_port(u16::from_be(rdma_get_dst_port(self.raw())));
            Some(addr)
        }
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the QP of this id (if any) was destroyed first (the Qp owner holds an Arc of
        // the id); all events were acknowledged; the id is destroyed exactly once, before its
        // channel (whose Arc we still hold).
        let ret = unsafe { rdma_destroy_id(self.raw()) };
        if ret != 0 {
            tracing::warn!(error = %errno_error("rdma_destroy_id"), "verbs: destroying a cm id failed");
        }
    }
}

/// Connection parameters for connect and accept: the HELLO as private data, no RDMA READ
/// resources, the transport retry count, and no RNR retries.
pub(super) struct ConnParam {
    pub(super) private_data: Vec<u8>,
    pub(super) retry_count: u8,
    pub(super) rnr_retry_count: u8,
}

impl ConnParam {
    fn raw(&self) -> rdma_conn_param {
        rdma_conn_param {
            private_data: self.private_data.as_ptr().cast(),
            private_data_len: u8::try_from(self.private_data.len()).unwrap_or(u8::MAX),
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        }
    }
}

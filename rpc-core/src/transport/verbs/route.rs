//! Which RDMA device serves an address ([`verbs_device_for`]): the runtime's `Auto`
//! transport choice, answered by binding cm ids and a route lookup, without sending a packet.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;

use super::cm::{CmId, EventChannel};
use super::device::{context_name, DeviceList};
use super::sys;
use crate::Error;

/// Which RDMA device serves `addr`: `Some(device name)` if the address is local to an RDMA
/// device, or if the route to it leaves through one (the source address the kernel's routing
/// picks for it belongs to an RDMA device); `None` if there is no RDMA device, or none for that
/// address. The wildcard address gives the first device.
///
/// No packet is sent: the route is looked up by `connect(2)` on a UDP socket. (Address
/// resolution, which needs ARP, could fail on one lost packet and make a reachable RDMA peer
/// look like one without RDMA; [`super::VerbsEndpoint::connect`] does it, with retries.)
pub fn verbs_device_for(addr: &SocketAddr) -> Result<Option<String>, Error> {
    let unavailable = |e: &Error| matches!(e, Error::TransportUnavailable { .. });
    if addr.ip().is_unspecified() {
        return match DeviceList::open() {
            Ok(list) => Ok(list.contexts().first().map(|&ctx| {
                // SAFETY: contexts in a live DeviceList are open.
                unsafe { context_name(ctx) }
            })),
            Err(e) if unavailable(&e) => Ok(None),
            Err(e) => Err(e),
        };
    }
    let channel = match EventChannel::new() {
        Ok(channel) => channel,
        Err(e) if unavailable(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    match local_device(&channel, addr.ip())? {
        Bound::Device(name) => return Ok(Some(name)),
        Bound::NoDevice => return Ok(None),
        Bound::NotLocal => {}
    }
    // Not a local address: which local address would the route to it leave from?
    let source = match route_source(addr) {
        Ok(source) => source,
        Err(e) => {
            tracing::debug!(%addr, error = %e, "verbs: no route to the address");
            return Ok(None);
        }
    };
    match local_device(&channel, source) {
        Ok(Bound::Device(name)) => Ok(Some(name)),
        Ok(_) => Ok(None),
        Err(e) => {
            tracing::debug!(%addr, %source, error = %e, "verbs: the route's source address does not bind");
            Ok(None)
        }
    }
}

/// What binding a cm id to a local address found.
enum Bound {
    /// The address is local and an RDMA device serves it (its name).
    Device(String),
    /// The address is local, but no RDMA device serves it.
    NoDevice,
    /// The address is not local.
    NotLocal,
}

fn local_device(channel: &Arc<EventChannel>, ip: IpAddr) -> Result<Bound, Error> {
    let id = CmId::new(channel)?;
    match id.bind(SocketAddr::new(ip, 0)) {
        Ok(()) => {
            let ctx = id.verbs();
            if ctx.is_null() {
                return Ok(Bound::NoDevice);
            }
            // SAFETY: the bound id keeps its device context open.
            Ok(Bound::Device(unsafe { context_name(ctx) }))
        }
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(Bound::NotLocal),
        Err(e) if sys::is_no_device(&e) => Ok(Bound::NoDevice),
        Err(e) => Err(sys::os_error("rdma_bind_addr", e)),
    }
}

/// The source address the kernel would use to send to `addr` (a route lookup; no packet).
fn route_source(addr: &SocketAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = if addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(any)?;
    // The port plays no part in the route; connect(2) refuses port 0 on some systems.
    let mut dst = *addr;
    if dst.port() == 0 {
        dst.set_port(9);
    }
    socket.connect(dst)?;
    Ok(socket.local_addr()?.ip())
}

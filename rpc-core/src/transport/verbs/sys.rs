//! Small operating-system helpers for the verbs transport: error mapping, socket addresses in
//! the C layout librdmacm wants, an eventfd for wake-ups, `poll(2)`, and the locked-memory limit.

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::Error;

/// What every "no device" error says, so users learn what to do about it.
pub(super) const NO_DEVICE: &str = "no RDMA device found; load an RDMA driver (for Soft-RoCE: \
     `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <interface>`), check `ibv_devices`, \
     or use the TCP transport";

/// The error of a librdmacm call that returned -1 and set `errno`.
pub(super) fn errno_error(call: &'static str) -> Error {
    os_error(call, io::Error::last_os_error())
}

/// The error of a libibverbs call that returns the error number itself (0 on success).
pub(super) fn status_error(call: &'static str, ret: i32) -> Error {
    let err = if ret > 0 {
        io::Error::from_raw_os_error(ret)
    } else {
        io::Error::last_os_error()
    };
    os_error(call, err)
}

/// Maps an OS error of a verbs call to the crate error; "no device" becomes
/// [`Error::TransportUnavailable`] with a message that says so.
pub(super) fn os_error(call: &'static str, err: io::Error) -> Error {
    if is_no_device(&err) {
        return no_device();
    }
    Error::Verbs {
        call,
        reason: err.to_string(),
    }
}

/// Whether an OS error means "there is no RDMA device (or no RDMA stack) here".
pub(super) fn is_no_device(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENODEV) | Some(libc::ENOENT))
}

/// The "no RDMA device" error.
pub(super) fn no_device() -> Error {
    Error::TransportUnavailable {
        transport: "verbs",
        reason: NO_DEVICE.to_string(),
    }
}

/// Reads a C string that the verbs libraries own (device names, status strings).
///
/// # Safety
/// `ptr` must be null or point to a NUL-terminated string that stays valid for the call.
pub(super) unsafe fn c_string(ptr: *const libc::c_char) -> String {
    if ptr.is_null() {
        return String::from("?");
    }
    // SAFETY: the caller guarantees a valid NUL-terminated string.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The current locked-memory limit (`RLIMIT_MEMLOCK`), soft value in bytes; `None` means
/// unlimited or unknown.
pub(super) fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `lim`.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if ret != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(lim.rlim_cur)
}

/// Text for a memory-registration failure: names the locked-memory limit and `ulimit -l`.
pub(super) fn memlock_hint(requested: usize) -> String {
    let limit = match memlock_limit() {
        Some(bytes) => format!("{} KiB", bytes / 1024),
        None => "unlimited".to_string(),
    };
    format!(
        "registering {requested} bytes failed; registered memory counts against the locked-memory \
         limit (RLIMIT_MEMLOCK), currently {limit} (`ulimit -l` shows it in KiB); raise it \
         (`ulimit -l unlimited`, `memlock` in /etc/security/limits.conf, `LimitMEMLOCK=` for \
         systemd units, `--ulimit memlock=-1` for containers) or use smaller rings"
    )
}

/// A socket address in the C layout (`sockaddr_in` / `sockaddr_in6`).
pub(super) struct CSockAddr {
    storage: libc::sockaddr_storage,
}

impl CSockAddr {
    pub(super) fn new(addr: SocketAddr) -> CSockAddr {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(v4.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for
                // sockaddr_in; we write one value into its start.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin)
                };
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6)
                };
            }
        }
        CSockAddr { storage }
    }

    /// A pointer for librdmacm, which reads (never keeps) the address.
    pub(super) fn as_mut_ptr<T>(&mut self) -> *mut T {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}

/// Reads a `sockaddr` that librdmacm filled in (AF_INET or AF_INET6).
///
/// # Safety
/// `ptr` must point to a valid socket address whose storage matches its `sa_family`.
pub(super) unsafe fn socket_addr_from_c(ptr: *const libc::sockaddr) -> Option<SocketAddr> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a valid sockaddr; the family field comes first.
    let family = i32::from(unsafe { (*ptr).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: AF_INET addresses are stored as sockaddr_in.
            let sin = unsafe { &*(ptr.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 addresses are stored as sockaddr_in6.
            let sin6 = unsafe { &*(ptr.cast::<libc::sockaddr_in6>()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Puts a file descriptor into non-blocking mode.
pub(super) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL on a descriptor the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL with an integer argument; no memory is passed.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A non-blocking eventfd: `notify` makes it readable, `drain` resets it.
pub(super) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(super) fn new() -> Result<EventFd, Error> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Io(io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    pub(super) fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd. A full counter (EAGAIN)
        // means it is readable already, which is all a notification needs.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    pub(super) fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; EAGAIN (not readable) is fine.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut value as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    pub(super) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Most descriptors [`poll_readable`] takes.
pub(super) const MAX_POLL_FDS: usize = 4;

/// `poll(2)` for readability of up to [`MAX_POLL_FDS`] descriptors; returns which are readable
/// (or hung up / in error), as `ready[i]`. A timeout of `None` waits indefinitely; an
/// interrupted call reports nothing readable. No allocation: the poller calls this per sleep.
pub(super) fn poll_readable(
    fds: &[RawFd],
    timeout: Option<Duration>,
) -> io::Result<[bool; MAX_POLL_FDS]> {
    assert!(fds.len() <= MAX_POLL_FDS, "too many descriptors to poll");
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_POLL_FDS];
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ms: libc::c_int = match timeout {
        None => -1,
        // Round up so that a short timeout does not become a busy loop.
        Some(d) => d.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
    };
    // SAFETY: `pfds` is a valid, exclusively borrowed array of at least `fds.len()` entries.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    let mut ready = [false; MAX_POLL_FDS];
    if ret < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(ready);
        }
        return Err(err);
    }
    for (r, p) in ready.iter_mut().zip(&pfds[..fds.len()]) {
        *r = p.revents != 0;
    }
    Ok(ready)
}

/// Time left until `deadline` (zero once it passed).
pub(super) fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Milliseconds for librdmacm timeouts: at least 1, at most `i32::MAX`.
pub(super) fn timeout_ms(d: Duration) -> i32 {
    d.as_millis().clamp(1, i32::MAX as u128) as i32
}

/// Posts one receive of `len` bytes at `addr` (one scatter entry, key `lkey`) with `post`,
/// `ibv_post_recv` or `ibv_post_srq_recv` on a live queue, named `call` in the error.
pub(super) fn post_one_recv(
    call: &'static str,
    wr_id: u64,
    (addr, len, lkey): (u64, u32, u32),
    post: impl FnOnce(&mut rdma_sys::ibv_recv_wr, &mut *mut rdma_sys::ibv_recv_wr) -> i32,
) -> Result<(), Error> {
    let mut sge = rdma_sys::ibv_sge {
        addr,
        length: len,
        lkey,
    };
    let mut wr = rdma_sys::ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad: *mut rdma_sys::ibv_recv_wr = std::ptr::null_mut();
    let ret = post(&mut wr, &mut bad);
    if ret != 0 {
        return Err(status_error(call, ret));
    }
    Ok(())
}

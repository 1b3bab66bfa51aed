//! Device contexts and protection domains.
//!
//! librdmacm opens every RDMA device itself and hands out its `ibv_context` through the cm ids
//! bound to that device (`rdma_cm_id::verbs`); a QP created with `rdma_create_qp` must use a
//! PD of that very context. librdmacm closes a context only when the device is removed *and*
//! nobody holds a reference on it. [`DeviceList`] holds such a reference on every device (it is
//! the list of `rdma_get_devices`, released with `rdma_free_devices`), so a [`Device`] — which
//! holds an `Arc<DeviceList>` — keeps its context open for as long as anything built on it lives.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdma_sys::{
    ___ibv_query_port, ibv_alloc_pd, ibv_context, ibv_dealloc_pd, ibv_device_attr,
    ibv_get_device_name, ibv_pd, ibv_port_attr, ibv_query_device, rdma_free_devices,
    rdma_get_devices,
};

use super::sys::{c_string, errno_error, is_no_device, no_device, status_error};
use crate::Error;

/// The device contexts librdmacm knows, each pinned open while this list lives.
pub(super) struct DeviceList {
    list: NonNull<*mut ibv_context>,
    len: usize,
}

// SAFETY: the list is an immutable array of context pointers owned by librdmacm; reading it
// from any thread is fine, and `rdma_free_devices` (in Drop) takes librdmacm's own lock.
unsafe impl Send for DeviceList {}
// SAFETY: as above; no method mutates the list.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// Lists (and pins) all RDMA devices. No device is an error that says so.
    pub(super) fn open() -> Result<Arc<DeviceList>, Error> {
        let mut len: libc::c_int = 0;
        // SAFETY: rdma_get_devices writes the count into `len` and returns a NULL-terminated
        // array that we own until rdma_free_devices.
        let list = unsafe { rdma_get_devices(&mut len) };
        let Some(list) = NonNull::new(list) else {
            let err = std::io::Error::last_os_error();
            if is_no_device(&err) || err.raw_os_error().is_none() {
                return Err(no_device());
            }
            return Err(errno_error("rdma_get_devices"));
        };
        let list = DeviceList {
            list,
            len: usize::try_from(len).unwrap_or(0),
        };
        if list.len == 0 {
            return Err(no_device());
        }
        Ok(Arc::new(list))
    }

    /// The pinned contexts.
    pub(super) fn contexts(&self) -> &[*mut ibv_context] {
        // SAFETY: rdma_get_devices returned an array of `len` valid entries (plus the NULL
        // terminator) that lives until Drop.
        unsafe { std::slice::from_raw_parts(self.list.as_ptr(), self.len) }
    }

    pub(super) fn contains(&self, ctx: *mut ibv_context) -> bool {
        self.contexts().contains(&ctx)
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from rdma_get_devices and is freed exactly once, after every
        // Device (which holds an Arc of this list) and everything built on it is gone.
        unsafe { rdma_free_devices(self.list.as_ptr()) };
    }
}

/// Limits of a device that the transport sizes its queues by.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeviceCaps {
    pub(super) max_qp_wr: u32,
    pub(super) max_cqe: u32,
}

/// One RDMA device context (owned by librdmacm, pinned by the [`DeviceList`]).
pub(super) struct Device {
    ctx: NonNull<ibv_context>,
    name: String,
    caps: DeviceCaps,
    _list: Arc<DeviceList>,
}

// SAFETY: an ibv_context is designed for use from many threads (libibverbs is thread-safe);
// the fields we keep besides the pointer are immutable.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    /// The device of `ctx`, a context taken from a cm id. Fails if the context is not one
    /// librdmacm lists (it cannot be pinned then).
    pub(super) fn new(list: Arc<DeviceList>, ctx: *mut ibv_context) -> Result<Device, Error> {
        let ctx = NonNull::new(ctx).ok_or_else(no_device)?;
        if !list.contains(ctx.as_ptr()) {
            return Err(Error::Verbs {
                call: "rdma_get_devices",
                reason: "the cm id's device context is not in librdmacm's device list".into(),
            });
        }
        // SAFETY: `ctx` is a live context pinned by `list`.
        let name = unsafe { context_name(ctx.as_ptr()) };
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is live and `attr` is a valid, exclusively borrowed out-parameter.
        let ret = unsafe { ibv_query_device(ctx.as_ptr(), &mut attr) };
        if ret != 0 {
            return Err(status_error("ibv_query_device", ret));
        }
        let caps = DeviceCaps {
            max_qp_wr: u32::try_from(attr.max_qp_wr).unwrap_or(0),
            max_cqe: u32::try_from(attr.max_cqe).unwrap_or(0),
        };
        tracing::debug!(device = %name, ?caps, "verbs: device opened");
        Ok(Device {
            ctx,
            name,
            caps,
            _list: list,
        })
    }

    pub(super) fn ctx(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// Attributes of port `port_num` (1-based).
    pub(super) fn port_attr(&self, port_num: u8) -> Result<ibv_port_attr, Error> {
        // SAFETY: ibv_port_attr is plain old data; all-zero is a valid value.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is live; `attr` is a valid out-parameter of the size the
        // provider is told (rdma-sys passes size_of_val).
        let ret = unsafe { ___ibv_query_port(self.ctx.as_ptr(), port_num, &mut attr) };
        if ret != 0 {
            return Err(status_error("ibv_query_port", ret));
        }
        Ok(attr)
    }
}

/// The device name of a context.
///
/// # Safety
/// `ctx` must be a live device context.
pub(super) unsafe fn context_name(ctx: *mut ibv_context) -> String {
    // SAFETY: a live context points to its device; the name is a NUL-terminated string owned
    // by libibverbs for the life of the device.
    unsafe { c_string(ibv_get_device_name((*ctx).device)) }
}

/// A protection domain on a [`Device`].
pub(super) struct Pd {
    raw: NonNull<ibv_pd>,
    /// Bytes registered on this PD now (the endpoint's, one PD each; a statistic).
    registered: AtomicU64,
    _device: Arc<Device>,
}

// SAFETY: a PD is only passed to thread-safe verbs calls (reg_mr, create_qp, dealloc_pd).
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub(super) fn new(device: Arc<Device>) -> Result<Arc<Pd>, Error> {
        // SAFETY: the context is live (pinned by `device`).
        let raw = unsafe { ibv_alloc_pd(device.ctx()) };
        let raw = NonNull::new(raw).ok_or_else(|| errno_error("ibv_alloc_pd"))?;
        Ok(Arc::new(Pd {
            raw,
            registered: AtomicU64::new(0),
            _device: device,
        }))
    }

    /// Counts `bytes` registered on this PD (positive) or deregistered.
    pub(super) fn count_registered(&self, bytes: u64, registering: bool) {
        if registering {
            self.registered.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.registered.fetch_sub(bytes, Ordering::Relaxed);
        }
        super::stats::registered(bytes, registering);
    }

    /// Bytes registered on this PD now.
    pub(super) fn registered(&self) -> u64 {
        self.registered.load(Ordering::Relaxed)
    }

    pub(super) fn raw(&self) -> *mut ibv_pd {
        self.raw.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP on this PD holds an Arc<Pd>, so none is left; the context
        // is still open (`device` is dropped after this).
        let ret = unsafe { ibv_dealloc_pd(self.raw.as_ptr()) };
        if ret != 0 {
            tracing::warn!(error = %status_error("ibv_dealloc_pd", ret), "verbs: leaking a PD");
        }
    }
}

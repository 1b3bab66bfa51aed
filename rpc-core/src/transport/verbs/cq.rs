//! The completion queue of an endpoint and its completion channel: [`RawCq`] (one `ibv_cq`
//! shared by all links, sized by their reservations) and [`CompChannel`] (the descriptor its
//! events arrive on), with the calls made on them. What the completions mean is the
//! `completions` module's business.
//!
//! Channel events are fetched with `ibv_get_cq_event` and acknowledged in batches of
//! [`ACK_BATCH`] (and at drop, since `ibv_destroy_cq` waits for every event to be
//! acknowledged).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_resize_cq, ibv_wc,
    ibv_wc_status, ibv_wc_status_str,
};
use rpc_sync::Mutex;

use super::device::Device;
use super::sys::{c_string, errno_error, os_error, set_nonblocking, status_error};
use crate::Error;

/// Completion events acknowledged per `ibv_ack_cq_events`.
const ACK_BATCH: u32 = 16;
/// Size of a new CQ before any link reserved entries.
const INITIAL_CQE: u32 = 256;

/// A completion channel (the descriptor CQ events arrive on), non-blocking.
pub(super) struct CompChannel {
    raw: NonNull<ibv_comp_channel>,
    _device: Arc<Device>,
}

// SAFETY: the channel is a descriptor plus a struct owned by libibverbs; the calls on it
// (get_cq_event, destroy) are thread-safe, and we only read `fd`.
unsafe impl Send for CompChannel {}
// SAFETY: as above.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    pub(super) fn new(device: Arc<Device>) -> Result<Arc<CompChannel>, Error> {
        // SAFETY: the context is live (pinned by `device`).
        let raw = unsafe { ibv_create_comp_channel(device.ctx()) };
        let raw = NonNull::new(raw).ok_or_else(|| errno_error("ibv_create_comp_channel"))?;
        let channel = Arc::new(CompChannel {
            raw,
            _device: device,
        });
        set_nonblocking(channel.fd()).map_err(|e| os_error("fcntl(O_NONBLOCK)", e))?;
        Ok(channel)
    }

    pub(super) fn fd(&self) -> i32 {
        // SAFETY: the channel is live; `fd` is set at creation and never changes.
        unsafe { self.raw.as_ref() }.fd
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on this channel holds an Arc of it, so none is left.
        let ret = unsafe { ibv_destroy_comp_channel(self.raw.as_ptr()) };
        if ret != 0 {
            tracing::warn!(error = %status_error("ibv_destroy_comp_channel", ret), "verbs: leak");
        }
    }
}

struct Budget {
    capacity: u32,
    reserved: u32,
}

/// An `ibv_cq` bound to a completion channel; sized by the links' reservations.
pub(super) struct RawCq {
    raw: NonNull<ibv_cq>,
    /// Completion events fetched and not yet acknowledged.
    unacked: AtomicU32,
    budget: Mutex<Budget>,
    max_cqe: u32,
    channel: Arc<CompChannel>,
    _device: Arc<Device>,
}

// SAFETY: polling, arming and resizing a CQ are thread-safe in libibverbs (providers lock the
// CQ); the handle is destroyed in Drop with exclusive access.
unsafe impl Send for RawCq {}
// SAFETY: as above.
unsafe impl Sync for RawCq {}

impl RawCq {
    pub(super) fn new(device: Arc<Device>, channel: Arc<CompChannel>) -> Result<Arc<RawCq>, Error> {
        let max_cqe = device.caps().max_cqe.max(1);
        let cqe = INITIAL_CQE.min(max_cqe);
        // SAFETY: the context and channel are live and outlive the CQ (we hold Arcs).
        let raw = unsafe {
            ibv_create_cq(
                device.ctx(),
                cqe as libc::c_int,
                std::ptr::null_mut(),
                channel.raw.as_ptr(),
                0,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| errno_error("ibv_create_cq"))?;
        // SAFETY: the CQ is live; `cqe` holds the granted size.
        let capacity = u32::try_from(unsafe { raw.as_ref() }.cqe).unwrap_or(cqe);
        tracing::debug!(capacity, max_cqe, "verbs: CQ created");
        Ok(Arc::new(RawCq {
            raw,
            unacked: AtomicU32::new(0),
            budget: Mutex::new(Budget {
                capacity,
                reserved: 0,
            }),
            max_cqe,
            channel,
            _device: device,
        }))
    }

    pub(super) fn raw(&self) -> *mut ibv_cq {
        self.raw.as_ptr()
    }

    /// Reserves `n` entries for a link's work requests, growing the CQ (to twice the reserved
    /// total, so completions of links just torn down still fit) when needed.
    pub(super) fn reserve(self: &Arc<Self>, n: u32) -> Result<CqeReservation, Error> {
        let mut budget = self.budget.lock();
        let need = budget.reserved.saturating_add(n);
        if need > self.max_cqe {
            return Err(Error::Verbs {
                call: "ibv_resize_cq",
                reason: format!(
                    "the endpoint's completion queue would need {need} entries but the device \
                     allows {}; use fewer links per endpoint or fewer slots",
                    self.max_cqe
                ),
            });
        }
        let target = need.saturating_mul(2).min(self.max_cqe);
        if budget.capacity < target {
            // SAFETY: the CQ is live; providers serialize resizing with polling.
            let ret = unsafe { ibv_resize_cq(self.raw(), target as libc::c_int) };
            if ret == 0 {
                // SAFETY: the CQ is live; `cqe` holds the new size.
                budget.capacity = u32::try_from(unsafe { self.raw.as_ref() }.cqe).unwrap_or(target);
                tracing::debug!(capacity = budget.capacity, "verbs: CQ resized");
            } else if budget.capacity < need {
                return Err(status_error("ibv_resize_cq", ret));
            } else {
                tracing::debug!(
                    error = %status_error("ibv_resize_cq", ret),
                    "verbs: CQ not grown; the reserved entries still fit"
                );
            }
        }
        budget.reserved = need;
        Ok(CqeReservation {
            cq: self.clone(),
            n,
        })
    }

    /// Fetches up to `wcs.len()` work completions into `wcs`; returns how many (0 on an
    /// error, which is logged).
    pub(super) fn poll(&self, wcs: &mut [ibv_wc]) -> usize {
        let max = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: the CQ is live; `wcs` has room for `max` entries.
        let n = unsafe { rdma_sys::ibv_poll_cq(self.raw(), max, wcs.as_mut_ptr()) };
        if n < 0 {
            tracing::warn!(ret = n, "verbs: ibv_poll_cq failed");
            return 0;
        }
        n as usize
    }

    /// Arms the CQ: the next completion of any kind raises an event on the channel.
    pub(super) fn arm(&self) {
        // SAFETY: the CQ is live; arming for the next completion of any kind.
        let ret = unsafe { rdma_sys::ibv_req_notify_cq(self.raw(), 0) };
        if ret != 0 {
            tracing::warn!(error = %status_error("ibv_req_notify_cq", ret), "verbs: arm failed");
        }
    }

    /// The descriptor of the completion channel, readable when an event is waiting.
    pub(super) fn channel_fd(&self) -> i32 {
        self.channel.fd()
    }

    /// Fetches every waiting event of the (non-blocking) channel, acknowledging them in
    /// batches of [`ACK_BATCH`].
    pub(super) fn take_events(&self) {
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; out-parameters are valid.
            let ret = unsafe { ibv_get_cq_event(self.channel.raw.as_ptr(), &mut cq, &mut ctx) };
            if ret != 0 {
                break;
            }
            let unacked = self.unacked.fetch_add(1, Ordering::Relaxed) + 1;
            if unacked >= ACK_BATCH {
                self.ack_events(self.unacked.swap(0, Ordering::Relaxed));
            }
        }
    }

    fn ack_events(&self, n: u32) {
        if n > 0 {
            // SAFETY: the CQ is live; `n` events were fetched with ibv_get_cq_event and not yet
            // acknowledged.
            unsafe { ibv_ack_cq_events(self.raw(), n) };
        }
    }
}

impl Drop for RawCq {
    fn drop(&mut self) {
        self.ack_events(self.unacked.swap(0, Ordering::Relaxed));
        // SAFETY: every QP using this CQ holds an Arc of it, so none is left; all events are
        // acknowledged (above), so ibv_destroy_cq does not wait.
        let ret = unsafe { ibv_destroy_cq(self.raw()) };
        if ret != 0 {
            tracing::warn!(error = %status_error("ibv_destroy_cq", ret), "verbs: leaking a CQ");
        }
    }
}

/// CQ entries reserved by one link; released when the link is gone.
pub(super) struct CqeReservation {
    cq: Arc<RawCq>,
    n: u32,
}

impl Drop for CqeReservation {
    fn drop(&mut self) {
        let mut budget = self.cq.budget.lock();
        budget.reserved = budget.reserved.saturating_sub(self.n);
    }
}

/// Zeroed work completions: a buffer for [`RawCq::poll`].
pub(super) fn wc_buffer(n: usize) -> Vec<ibv_wc> {
    (0..n)
        // SAFETY: ibv_wc is plain old data; all-zero is a valid value.
        .map(|_| unsafe { std::mem::zeroed::<ibv_wc>() })
        .collect()
}

/// The name libibverbs gives a work completion status.
pub(super) fn wc_status_str(status: ibv_wc_status::Type) -> String {
    // SAFETY: ibv_wc_status_str returns a static string for any value.
    unsafe { c_string(ibv_wc_status_str(status)) }
}

//! The completion queues of an endpoint and their completion channel: [`RawCq`] (one `ibv_cq`,
//! sized by the reservations of the links on it, up to a cap), [`CqShards`] (as many of them
//! as the links need, all on one channel) and [`CompChannel`] (the descriptor their events
//! arrive on), with the calls made on them. What the completions mean is the `completions`
//! module's business.
//!
//! **Shards.** One CQ holds at most the device's `max_cqe` entries (32,767 on rdma_rxe), and a
//! link with rings of its own reserves two per slot: one CQ would cap an endpoint at 255
//! links of 64 slots. So a link reserves its entries on the first shard with room for them,
//! and a new shard is created when none has; each receive shard of a server's shared rings
//! gets a CQ of its own ([`CqShards::dedicated`]). Shards are never destroyed before the endpoint: a shard emptied
//! by closed links is reused by the next ones.
//!
//! Channel events are fetched with `ibv_get_cq_event` and acknowledged, on the shard they
//! name, in batches of [`ACK_BATCH`] (and at drop, since `ibv_destroy_cq` waits for every event
//! to be acknowledged).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_resize_cq, ibv_wc,
    ibv_wc_status, ibv_wc_status_str,
};
use rpc_sync::{Mutex, RwLock};

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

/// An `ibv_cq` bound to a completion channel; sized by the links' reservations, up to `cap`
/// entries.
pub(super) struct RawCq {
    raw: NonNull<ibv_cq>,
    /// Completion events fetched and not yet acknowledged.
    unacked: AtomicU32,
    budget: Mutex<Budget>,
    cap: u32,
    _channel: Arc<CompChannel>,
    _device: Arc<Device>,
}

// SAFETY: polling, arming and resizing a CQ are thread-safe in libibverbs (providers lock the
// CQ); the handle is destroyed in Drop with exclusive access.
unsafe impl Send for RawCq {}
// SAFETY: as above.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// A CQ on `channel` that grows up to `cap` entries (at most the device's `max_cqe`).
    fn new(device: Arc<Device>, channel: Arc<CompChannel>, cap: u32) -> Result<Arc<RawCq>, Error> {
        let cap = cap.clamp(1, device.caps().max_cqe.max(1));
        let cqe = INITIAL_CQE.min(cap);
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
        tracing::debug!(capacity, cap, "verbs: CQ created");
        Ok(Arc::new(RawCq {
            raw,
            unacked: AtomicU32::new(0),
            budget: Mutex::new(Budget {
                capacity,
                reserved: 0,
            }),
            cap,
            _channel: channel,
            _device: device,
        }))
    }

    pub(super) fn raw(&self) -> *mut ibv_cq {
        self.raw.as_ptr()
    }

    /// Reserves `n` entries for a link's work requests, growing the CQ (to twice the reserved
    /// total, so completions of links just torn down still fit) when needed; `None` when they
    /// would pass the cap.
    pub(super) fn reserve(self: &Arc<Self>, n: u32) -> Result<Option<CqeReservation>, Error> {
        let mut budget = self.budget.lock();
        let need = budget.reserved.saturating_add(n);
        if need > self.cap {
            return Ok(None);
        }
        let target = need.saturating_mul(2).min(self.cap);
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
        Ok(Some(CqeReservation {
            cq: self.clone(),
            n,
        }))
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

    /// Counts a completion event of this CQ, acknowledging them in batches of [`ACK_BATCH`].
    fn count_event(&self) {
        let unacked = self.unacked.fetch_add(1, Ordering::Relaxed) + 1;
        if unacked >= ACK_BATCH {
            self.ack_events(self.unacked.swap(0, Ordering::Relaxed));
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

/// The CQs of an endpoint: shards of at most `cap` entries each, on one completion channel.
pub(super) struct CqShards {
    device: Arc<Device>,
    channel: Arc<CompChannel>,
    cap: u32,
    shards: RwLock<Vec<Arc<RawCq>>>,
    /// `shards.len()`, read without the lock to see whether a copy is stale.
    count: AtomicUsize,
}

impl CqShards {
    /// The channel and a first shard of at most `cap` entries (0: the device's `max_cqe`).
    pub(super) fn new(device: Arc<Device>, cap: u32) -> Result<CqShards, Error> {
        let channel = CompChannel::new(device.clone())?;
        let max = device.caps().max_cqe.max(1);
        let cap = if cap == 0 { max } else { cap.min(max) };
        let first = RawCq::new(device.clone(), channel.clone(), cap)?;
        Ok(CqShards {
            device,
            channel,
            cap,
            shards: RwLock::new(vec![first]),
            count: AtomicUsize::new(1),
        })
    }

    fn add(&self, cap: u32) -> Result<Arc<RawCq>, Error> {
        let cq = RawCq::new(self.device.clone(), self.channel.clone(), cap)?;
        let mut shards = self.shards.write();
        shards.push(cq.clone());
        self.count.store(shards.len(), Ordering::Relaxed);
        tracing::debug!(shards = shards.len(), cap, "verbs: CQ shard added");
        Ok(cq)
    }

    /// Reserves `n` entries on the first shard with room for them, or on a new shard.
    pub(super) fn reserve(&self, n: u32) -> Result<(Arc<RawCq>, CqeReservation), Error> {
        if n > self.cap {
            return Err(Error::InvalidConfig(format!(
                "a link needs {n} completion entries but a completion queue holds at most {}; \
                 use fewer slots",
                self.cap
            )));
        }
        let shards = self.shards.read().clone();
        for cq in shards {
            if let Some(reservation) = cq.reserve(n)? {
                return Ok((cq, reservation));
            }
        }
        self.dedicated(n)
    }

    /// A new shard of its own with `n` entries reserved (the device's `max_cqe` at most).
    pub(super) fn dedicated(&self, n: u32) -> Result<(Arc<RawCq>, CqeReservation), Error> {
        let cq = self.add(n.max(self.cap))?;
        match cq.reserve(n)? {
            Some(reservation) => Ok((cq, reservation)),
            None => Err(Error::Verbs {
                call: "ibv_create_cq",
                reason: format!(
                    "{n} completion entries asked for one queue; the device allows {}",
                    self.device.caps().max_cqe
                ),
            }),
        }
    }

    /// How many shards there are.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Brings `copy` up to date with the shards (they are only ever added).
    pub(super) fn refresh(&self, copy: &mut Vec<Arc<RawCq>>) {
        if copy.len() != self.len() {
            copy.clone_from(&self.shards.read());
        }
    }

    /// The descriptor of the completion channel, readable when an event is waiting.
    pub(super) fn channel_fd(&self) -> i32 {
        self.channel.fd()
    }

    /// Fetches every waiting event of the (non-blocking) channel, counting each on the shard
    /// it names (acknowledged in batches).
    pub(super) fn take_events(&self, shards: &[Arc<RawCq>]) {
        loop {
            let mut raw: *mut ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; out-parameters are valid.
            let ret = unsafe { ibv_get_cq_event(self.channel.raw.as_ptr(), &mut raw, &mut ctx) };
            if ret != 0 {
                break;
            }
            match shards.iter().find(|cq| cq.raw() == raw) {
                Some(cq) => cq.count_event(),
                None => match self.shards.read().iter().find(|cq| cq.raw() == raw) {
                    Some(cq) => cq.count_event(),
                    None => tracing::warn!("verbs: an event for an unknown CQ"),
                },
            }
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

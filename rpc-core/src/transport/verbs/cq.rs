//! The completion queue of an endpoint: one `ibv_cq` with one completion channel, shared by
//! all links, and [`VerbsCq`], its [`CompletionQueue`] face.
//!
//! The CQ needs a device context, which rdma_cm knows only after an id was bound or resolved.
//! So [`CqShared`] exists from the endpoint's creation (the poller can wait on it at once), and
//! the device resources (PD, completion channel, CQ) are created on first use, from the first
//! cm id's context (`ensure_device`). An endpoint then stays on that device.
//!
//! **Polling.** `poll` drains work completions in batches of [`BATCH`] into a stash (the
//! surplus beyond `max` waits there for the next call), maps each to a [`Completion`] through
//! the link table (wr_id → link key → link), and reports `Closed` for error completions once
//! per link. Links closed by a cm event or `Link::close` are queued on a side queue; their
//! `Closed` is reported only after the CQ was found empty, so frames that arrived before the
//! disconnect are delivered first.
//!
//! **Waiting.** `wait` arms the CQ (`ibv_req_notify_cq`), polls once more into the stash to
//! close the race, and only then sleeps in `poll(2)` on the channel's descriptor (made
//! non-blocking) and an eventfd that `wake` writes. Channel events are fetched with
//! `ibv_get_cq_event` and acknowledged in batches of [`ACK_BATCH`] (and at drop, since
//! `ibv_destroy_cq` waits for every event to be acknowledged).

use std::collections::{HashMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use crossbeam::queue::SegQueue;
use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_context, ibv_cq, ibv_create_comp_channel,
    ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_resize_cq,
    ibv_wc, ibv_wc_status, ibv_wc_status_str,
};
use rpc_sync::{Mutex, RwLock};

use super::device::{Device, DeviceList, Pd};
use super::link::{decode_wr_id, LinkInner, MAX_KEY};
use super::sys::{
    c_string, errno_error, os_error, poll_readable, set_nonblocking, status_error, EventFd,
};
use crate::transport::{Completion, CompletionQueue, RecvBuf, RecvInner};
use crate::Error;

/// Work completions fetched per `ibv_poll_cq`.
pub(super) const BATCH: usize = 32;
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
    fn new(device: Arc<Device>, channel: Arc<CompChannel>) -> Result<Arc<RawCq>, Error> {
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

/// The device resources of an endpoint.
pub(super) struct DeviceRes {
    pub(super) cq: Arc<RawCq>,
    pub(super) pd: Arc<Pd>,
    pub(super) device: Arc<Device>,
}

/// One work completion, copied out of `ibv_wc`.
#[derive(Clone, Copy)]
struct Wc {
    wr_id: u64,
    status: ibv_wc_status::Type,
    byte_len: u32,
    vendor_err: u32,
}

struct PollState {
    wcs: Vec<ibv_wc>,
    stash: VecDeque<Wc>,
    /// Links whose Closed waits for the CQ to be drained.
    pending_close: Vec<u32>,
}

/// State shared by the endpoint, its links and its [`VerbsCq`].
pub(super) struct CqShared {
    dev: OnceLock<Arc<DeviceRes>>,
    init: Mutex<()>,
    links: RwLock<HashMap<u32, Weak<LinkInner>>>,
    next_key: AtomicU32,
    closed: SegQueue<u32>,
    wake: EventFd,
    poll: Mutex<PollState>,
}

impl CqShared {
    pub(super) fn new() -> Result<Arc<CqShared>, Error> {
        let wcs = (0..BATCH)
            // SAFETY: ibv_wc is plain old data; all-zero is a valid value.
            .map(|_| unsafe { std::mem::zeroed::<ibv_wc>() })
            .collect();
        Ok(Arc::new(CqShared {
            dev: OnceLock::new(),
            init: Mutex::new(()),
            links: RwLock::new(HashMap::new()),
            next_key: AtomicU32::new(1),
            closed: SegQueue::new(),
            wake: EventFd::new()?,
            poll: Mutex::new(PollState {
                wcs,
                stash: VecDeque::with_capacity(BATCH),
                pending_close: Vec::new(),
            }),
        }))
    }

    /// The device resources, once created.
    pub(super) fn device(&self) -> Option<&Arc<DeviceRes>> {
        self.dev.get()
    }

    /// The device resources for `ctx` (a cm id's context), created on first use.
    pub(super) fn ensure_device(
        &self,
        list: &Mutex<Arc<DeviceList>>,
        ctx: *mut ibv_context,
    ) -> Result<Arc<DeviceRes>, Error> {
        if ctx.is_null() {
            return Err(super::sys::no_device());
        }
        let check = |res: &Arc<DeviceRes>| {
            if res.device.ctx() == ctx {
                Ok(res.clone())
            } else {
                // SAFETY: `ctx` comes from a live cm id, which keeps its device open.
                let other = unsafe { super::device::context_name(ctx) };
                Err(Error::TransportUnavailable {
                    transport: "verbs",
                    reason: format!(
                        "this endpoint uses RDMA device {} and cannot also use {other}; \
                         use one endpoint per device",
                        res.device.name()
                    ),
                })
            }
        };
        if let Some(res) = self.dev.get() {
            return check(res);
        }
        let _init = self.init.lock();
        if let Some(res) = self.dev.get() {
            return check(res);
        }
        let device = {
            let mut list = list.lock();
            if !list.contains(ctx) {
                // A device that appeared after the list was taken: list (and pin) again.
                *list = DeviceList::open()?;
            }
            Arc::new(Device::new(list.clone(), ctx)?)
        };
        let pd = Pd::new(device.clone())?;
        let channel = CompChannel::new(device.clone())?;
        let cq = RawCq::new(device.clone(), channel)?;
        let res = Arc::new(DeviceRes { cq, pd, device });
        let _ = self.dev.set(res.clone());
        // A poller sleeping without the channel's descriptor must re-arm with it.
        self.wake.notify();
        Ok(res)
    }

    pub(super) fn next_key(&self) -> Result<u32, Error> {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        if key == 0 || key > MAX_KEY {
            return Err(Error::Verbs {
                call: "link table",
                reason: "link keys exhausted for this endpoint".into(),
            });
        }
        Ok(key)
    }

    pub(super) fn register(&self, key: u32, link: &Arc<LinkInner>) {
        self.links.write().insert(key, Arc::downgrade(link));
    }

    pub(super) fn unregister(&self, key: u32) {
        self.links.write().remove(&key);
    }

    pub(super) fn lookup(&self, key: u32) -> Option<Arc<LinkInner>> {
        self.links.read().get(&key).and_then(Weak::upgrade)
    }

    /// Queues the Closed completion of link `key` and wakes the poller.
    pub(super) fn push_closed(&self, key: u32) {
        self.closed.push(key);
        self.wake.notify();
    }

    /// Fetches up to [`BATCH`] work completions into the stash; returns how many.
    fn fetch(&self, state: &mut PollState) -> usize {
        let Some(res) = self.dev.get() else {
            return 0;
        };
        // SAFETY: the CQ is live; `wcs` has room for BATCH entries.
        let n =
            unsafe { rdma_sys::ibv_poll_cq(res.cq.raw(), BATCH as i32, state.wcs.as_mut_ptr()) };
        if n < 0 {
            tracing::warn!(ret = n, "verbs: ibv_poll_cq failed");
            return 0;
        }
        let n = n as usize;
        for wc in &state.wcs[..n] {
            state.stash.push_back(Wc {
                wr_id: wc.wr_id,
                status: wc.status,
                byte_len: wc.byte_len,
                vendor_err: wc.vendor_err,
            });
        }
        n
    }

    /// Maps one work completion; returns whether a completion was appended.
    fn handle(
        &self,
        wc: Wc,
        cache: &mut Option<Arc<LinkInner>>,
        out: &mut Vec<Completion>,
    ) -> bool {
        let (is_send, key, slot) = decode_wr_id(wc.wr_id);
        let link = match cache {
            Some(link) if link.key() == key => link.clone(),
            _ => match self.lookup(key) {
                Some(link) => {
                    *cache = Some(link.clone());
                    link
                }
                // A link already dropped: its QP is destroyed, nothing to do.
                None => return false,
            },
        };
        if link.closed_reported() {
            if is_send {
                link.sends_completed_through(slot);
            }
            return false;
        }
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            if is_send {
                link.sends_completed_through(slot);
            }
            // SAFETY: ibv_wc_status_str returns a static string for any value.
            let status = unsafe { c_string(ibv_wc_status_str(wc.status)) };
            if link.is_closing() {
                // Expected flushes of a closing link; its Closed comes from the side queue.
                tracing::trace!(link = link.id(), %status, "verbs: flushed");
                return false;
            }
            let reason = format!(
                "{status} (status {}, vendor error {:#x}) on a {} work request",
                wc.status,
                wc.vendor_err,
                if is_send { "send" } else { "receive" }
            );
            tracing::warn!(link = link.id(), %reason, "verbs: work completion error, closing the link");
            link.begin_close(reason.clone());
            link.disconnect();
            if link.claim_closed_report() {
                out.push(Completion::Closed {
                    link: link.id(),
                    reason,
                });
                return true;
            }
            return false;
        }
        if is_send {
            link.sends_completed_through(slot);
            out.push(Completion::SendDone { link: link.id() });
            return true;
        }
        let len = wc.byte_len as usize;
        out.push(Completion::Recv {
            link: link.id(),
            buf: RecvBuf {
                inner: RecvInner::Verbs(link.recv_buf(slot)),
                len,
            },
        });
        true
    }
}

/// The endpoint's [`CompletionQueue`].
pub struct VerbsCq {
    shared: Arc<CqShared>,
}

impl VerbsCq {
    pub(super) fn new(shared: Arc<CqShared>) -> VerbsCq {
        VerbsCq { shared }
    }
}

impl CompletionQueue for VerbsCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let shared = &self.shared;
        let mut state = shared.poll.lock();
        while let Some(key) = shared.closed.pop() {
            state.pending_close.push(key);
        }
        let mut cache = None;
        let mut appended = 0;
        let mut drained = false;
        while appended < max {
            let wc = match state.stash.pop_front() {
                Some(wc) => wc,
                None => {
                    if shared.fetch(&mut state) == 0 {
                        drained = true;
                        break;
                    }
                    continue;
                }
            };
            if shared.handle(wc, &mut cache, out) {
                appended += 1;
            }
        }
        if drained {
            while appended < max {
                let Some(key) = state.pending_close.pop() else {
                    break;
                };
                if let Some(link) = shared.lookup(key) {
                    if link.claim_closed_report() {
                        out.push(Completion::Closed {
                            link: link.id(),
                            reason: link.close_reason(),
                        });
                        appended += 1;
                    }
                }
            }
        }
        appended
    }

    fn wait(&self, timeout: Option<Duration>) {
        rpc_sync::assert_unlocked("waiting for completions");
        let shared = &self.shared;
        if !shared.closed.is_empty() {
            return;
        }
        let res = shared.dev.get();
        if let Some(res) = res {
            // SAFETY: the CQ is live; arming for the next completion of any kind.
            let ret = unsafe { rdma_sys::ibv_req_notify_cq(res.cq.raw(), 0) };
            if ret != 0 {
                tracing::warn!(error = %status_error("ibv_req_notify_cq", ret), "verbs: arm failed");
            }
            let mut state = shared.poll.lock();
            if !state.stash.is_empty() || !state.pending_close.is_empty() {
                return;
            }
            // A completion that arrived before arming raises no event: look once more.
            if shared.fetch(&mut state) > 0 {
                return;
            }
        }
        let both = [shared.wake.raw(), res.map_or(-1, |res| res.cq.channel.fd())];
        let fds = if res.is_some() { &both[..] } else { &both[..1] };
        let ready = match poll_readable(fds, timeout) {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!(error = %e, "verbs: poll(2) failed");
                return;
            }
        };
        if ready[0] {
            shared.wake.drain();
        }
        if let (Some(res), true) = (res, ready[1]) {
            loop {
                let mut cq: *mut ibv_cq = std::ptr::null_mut();
                let mut ctx: *mut libc::c_void = std::ptr::null_mut();
                // SAFETY: the channel is live and non-blocking; out-parameters are valid.
                let ret =
                    unsafe { ibv_get_cq_event(res.cq.channel.raw.as_ptr(), &mut cq, &mut ctx) };
                if ret != 0 {
                    break;
                }
                // A count of events to acknowledge, nothing published: Relaxed.
                let unacked = res.cq.unacked.fetch_add(1, Ordering::Relaxed) + 1;
                if unacked >= ACK_BATCH {
                    res.cq.ack_events(res.cq.unacked.swap(0, Ordering::Relaxed));
                }
            }
        }
    }

    fn wake(&self) {
        self.shared.wake.notify();
    }
}

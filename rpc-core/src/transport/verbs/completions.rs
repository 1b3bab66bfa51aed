//! The completions of an endpoint: its device resources (created on first use), and
//! [`VerbsCq`], the [`CompletionQueue`] that maps work completions to links.
//!
//! The CQ needs a device context, which rdma_cm knows only after an id was bound or resolved.
//! So [`CqShared`] exists from the endpoint's creation (the poller can wait on it at once), and
//! the device resources (PD, completion channel, CQ) are created on first use, from the first
//! cm id's context (`ensure_device`). An endpoint then stays on that device.
//!
//! **Polling.** `poll` first reports a `SendDone` for each link the table names as told
//! that a shared send slot is free. It then drains work completions in batches of [`BATCH`]
//! into a stash (the surplus beyond `max` waits there for the next call), from the CQ shards
//! in turn (each batch from the next shard that has any), maps each to a [`Completion`]
//! through the link table (wr_id → link key → link; a receive of the shared receive queue,
//! whose wr_id names no link, by its QP number → link key → link), and reports `Closed` for
//! error completions once per link. A shared receive slot that no open link reports goes
//! straight back to the SRQ. Links closed by a cm event or `Link::close` are queued on the
//! table's side queue; their `Closed` is reported only after every shard was found empty, so
//! frames that arrived before the disconnect are delivered first.
//!
//! **Waiting.** `wait` arms every shard (`ibv_req_notify_cq`), polls once more into the stash
//! to close the race, and only then sleeps in `poll(2)` on the shards' channel descriptor
//! (made non-blocking) and the table's eventfd, which `wake` writes.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use rdma_sys::{ibv_context, ibv_wc, ibv_wc_status};
use rpc_sync::Mutex;

use super::cq::{wc_buffer, wc_status_str, CqShards, RawCq};
use super::device::{context_name, Device, DeviceList, Pd};
use super::link::{LinkInner, Links};
use super::shared_pools::SharedPools;
use super::sys::{no_device, poll_readable};
use super::wr_id::{decode_wr_id, shared_index};
use crate::transport::{self, Completion, CompletionQueue, Driver, RecvBuf, RecvInner};
use crate::Error;

/// Work completions fetched per `ibv_poll_cq`.
pub(super) const BATCH: usize = 32;

/// The device resources of an endpoint.
pub(super) struct DeviceRes {
    pub(super) cqs: CqShards,
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
    qp_num: u32,
}

struct PollState {
    /// A copy of the CQ shards, polled round-robin from `next`.
    shards: Vec<Arc<RawCq>>,
    next: usize,
    wcs: Vec<ibv_wc>,
    stash: VecDeque<Wc>,
    /// Links whose Closed waits for the CQ to be drained.
    pending_close: Vec<u32>,
}

/// State shared by the endpoint and its [`VerbsCq`].
pub(super) struct CqShared {
    dev: OnceLock<Arc<DeviceRes>>,
    /// The endpoint's shared rings, once an acceptor created them.
    shared: OnceLock<Arc<SharedPools>>,
    init: Mutex<()>,
    /// Most entries of one CQ shard (0: the device's maximum).
    shard_entries: u32,
    links: Arc<Links>,
    poll: Mutex<PollState>,
}

impl CqShared {
    /// The completions of `links`, in CQ shards of at most `shard_entries` entries (0: the
    /// device's maximum).
    pub(super) fn new(links: Arc<Links>, shard_entries: u32) -> Arc<CqShared> {
        Arc::new(CqShared {
            dev: OnceLock::new(),
            shared: OnceLock::new(),
            init: Mutex::new(()),
            shard_entries,
            links,
            poll: Mutex::new(PollState {
                shards: Vec::new(),
                next: 0,
                wcs: wc_buffer(BATCH),
                stash: VecDeque::with_capacity(BATCH),
                pending_close: Vec::new(),
            }),
        })
    }

    /// The device resources, once created.
    pub(super) fn device(&self) -> Option<&Arc<DeviceRes>> {
        self.dev.get()
    }

    /// The endpoint's shared rings on `res`, created on first use with `config` and send
    /// slots of `send_slot_size` bytes (later calls get those, whatever they pass).
    pub(super) fn ensure_shared(
        &self,
        res: &DeviceRes,
        config: transport::SharedRings,
        send_slot_size: u32,
    ) -> Result<Arc<SharedPools>, Error> {
        if let Some(shared) = self.shared.get() {
            return Ok(shared.clone());
        }
        let _init = self.init.lock();
        if let Some(shared) = self.shared.get() {
            return Ok(shared.clone());
        }
        let shared = SharedPools::new(&res.pd, config, send_slot_size)?;
        let _ = self.shared.set(shared.clone());
        Ok(shared)
    }

    /// A slot of shared receive shard `index` that no link will report (its link is gone):
    /// back to its SRQ.
    fn repost_shared(&self, index: u32, slot: u32) {
        if let Some(shared) = self.shared.get() {
            shared.repost(index, slot);
        }
    }

    /// The device resources for `ctx` (a cm id's context), created on first use.
    pub(super) fn ensure_device(
        &self,
        list: &Mutex<Arc<DeviceList>>,
        ctx: *mut ibv_context,
    ) -> Result<Arc<DeviceRes>, Error> {
        if ctx.is_null() {
            return Err(no_device());
        }
        let check = |res: &Arc<DeviceRes>| {
            if res.device.ctx() == ctx {
                Ok(res.clone())
            } else {
                // SAFETY: `ctx` comes from a live cm id, which keeps its device open.
                let other = unsafe { context_name(ctx) };
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
        let cqs = CqShards::new(device.clone(), self.shard_entries)?;
        let res = Arc::new(DeviceRes { cqs, pd, device });
        let _ = self.dev.set(res.clone());
        // A poller sleeping without the channel's descriptor must re-arm with it.
        self.links.wake();
        Ok(res)
    }

    /// Fetches up to [`BATCH`] work completions into the stash from the first shard, from
    /// `next` on, that has some; returns how many.
    fn fetch(&self, state: &mut PollState) -> usize {
        let Some(res) = self.dev.get() else {
            return 0;
        };
        res.cqs.refresh(&mut state.shards);
        let shards = state.shards.len();
        let mut n = 0;
        for _ in 0..shards {
            let cq = &state.shards[state.next % shards];
            state.next = (state.next + 1) % shards;
            n = cq.poll(&mut state.wcs);
            if n > 0 {
                break;
            }
        }
        super::stats::polled(n);
        for wc in &state.wcs[..n] {
            state.stash.push_back(Wc {
                wr_id: wc.wr_id,
                status: wc.status,
                byte_len: wc.byte_len,
                vendor_err: wc.vendor_err,
                qp_num: wc.qp_num,
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
        let shard = if is_send { None } else { shared_index(key) };
        let shared = shard.is_some();
        let key = match shard {
            Some(index) => match self.links.key_of_qp(wc.qp_num) {
                Some(key) => key,
                None => {
                    self.repost_shared(index, slot);
                    return false;
                }
            },
            None => key,
        };
        let link = match cache {
            Some(link) if link.key() == key => link.clone(),
            _ => match self.links.lookup(key) {
                Some(link) => {
                    *cache = Some(link.clone());
                    link
                }
                // A link already dropped: its QP is destroyed, nothing to do (but a shared
                // slot goes back to the SRQ).
                None => {
                    if let Some(index) = shard {
                        self.repost_shared(index, slot);
                    }
                    return false;
                }
            },
        };
        if link.closed_reported() {
            if is_send {
                link.sends_completed_through(slot);
            } else if shared {
                link.repost(slot);
            }
            return false;
        }
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            if is_send {
                link.sends_completed_through(slot);
            } else if shared {
                link.repost(slot);
            }
            let status = wc_status_str(wc.status);
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
    fn registered_bytes(&self) -> u64 {
        self.shared.device().map_or(0, |res| res.pd.registered())
    }

    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let shared = &self.shared;
        let mut state = shared.poll.lock();
        while let Some(key) = shared.links.pop_closed() {
            state.pending_close.push(key);
        }
        let mut appended = 0;
        while appended < max {
            let Some(key) = shared.links.pop_send_ready() else {
                break;
            };
            if let Some(link) = shared.links.lookup(key).filter(|l| !l.closed_reported()) {
                out.push(Completion::SendDone { link: link.id() });
                appended += 1;
            }
        }
        let mut cache = None;
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
                if let Some(link) = shared.links.lookup(key) {
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
        if shared.links.has_side_work() {
            return;
        }
        let res = shared.dev.get();
        if let Some(res) = res {
            let mut state = shared.poll.lock();
            res.cqs.refresh(&mut state.shards);
            for cq in &state.shards {
                cq.arm();
            }
            if !state.stash.is_empty() || !state.pending_close.is_empty() {
                return;
            }
            // A completion that arrived before arming raises no event: look once more.
            if shared.fetch(&mut state) > 0 {
                return;
            }
        }
        let both = [
            shared.links.wake_fd(),
            res.map_or(-1, |res| res.cqs.channel_fd()),
        ];
        let fds = if res.is_some() { &both[..] } else { &both[..1] };
        let ready = match poll_readable(fds, timeout) {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!(error = %e, "verbs: poll(2) failed");
                return;
            }
        };
        if ready[0] {
            shared.links.drain_wake();
        }
        if let (Some(res), true) = (res, ready[1]) {
            let state = shared.poll.lock();
            res.cqs.take_events(&state.shards);
        }
    }

    fn wake(&self) {
        self.shared.links.wake();
    }

    fn set_driver(&self, driver: Weak<dyn Driver>) {
        self.shared.links.set_on_close(Box::new(move || {
            if let Some(endpoint) = driver.upgrade() {
                endpoint.link_closed();
            }
        }));
    }
}

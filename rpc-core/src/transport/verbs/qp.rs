//! The RC queue pair of a link, created with `rdma_create_qp` on the link's cm id, and the
//! attribute choices made for it.
//!
//! | attribute | value | why |
//! |---|---|---|
//! | `rnr_retry` | 0 (via `rdma_conn_param::rnr_retry_count`) | credits guarantee a posted receive for every SEND; a single RNR NAK means the protocol broke and must surface as `RNR_RETRY_EXC_ERR` at once instead of stalling |
//! | `retry_cnt` | 6 (via `rdma_conn_param::retry_count`) | the transport retransmits lost packets up to 6 times before `RETRY_EXC_ERR`; not 7, which Soft-RoCE (rdma_rxe) treats as *retry forever*, so a dead peer would never surface (measured: 20+ retries, no error) |
//! | `min_rnr_timer` | 12 (0.64 ms), set with `ibv_modify_qp` RTS→RTS after establishment | rdma_cm leaves it at 0, which the spec maps to 655 ms; with `rnr_retry` 0 it is never waited for, but a value is chosen deliberately should anyone raise `rnr_retry` |
//! | `max_rd_atomic` / `max_dest_rd_atomic` | 0 (`initiator_depth` / `responder_resources`) | no RDMA READ or atomics: every transfer is a two-sided SEND |
//! | path MTU | what rdma_cm derives from the port / netdev (RoCE: the interface MTU) | checked against the port's `active_mtu` and logged; rdma_cm performs the RTR transition, so it cannot be chosen independently |
//! | `max_inline_data` | 256 requested, the device's grant used | small frames are copied into the WQE: no DMA read of the slot |
//! | `max_send_wr` / `max_recv_wr` | slot count | one WR per slot (a shared-ring link: per SEND of its quota, inline ones included); a slot or unit is reused only after the completion covering its WR was polled, so posting cannot overflow |
//! | `srq` | a server's shared receive queue, if it pools its slots | receives come from the SRQ, posted once for every QP (`shared_recv` module) |
//! | `sq_sig_all` | 0 | selective signalling (see the link module) |

use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::{
    ibv_modify_qp, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_cap, ibv_qp_init_attr,
    ibv_qp_type, ibv_query_qp, ibv_send_wr, ibv_sge, rdma_create_qp, rdma_destroy_qp,
};

use super::cm::CmId;
use super::cq::RawCq;
use super::device::Pd;
use super::srq::Srq;
use super::sys::{errno_error, post_one_recv, status_error};
use crate::Error;

/// Most SENDs chained into one `ibv_post_send`.
pub(super) const POST_CHAIN: usize = 16;

/// One SEND of [`Qp::post_sends`].
#[derive(Debug, Clone, Copy)]
pub(super) struct SendWr {
    pub(super) wr_id: u64,
    pub(super) addr: u64,
    pub(super) len: u32,
    pub(super) lkey: u32,
    pub(super) flags: u32,
}

/// Requested inline size.
const INLINE_REQUEST: u32 = 256;
/// `min_rnr_timer` encoding 12 = 0.64 ms.
pub(super) const MIN_RNR_TIMER: u8 = 12;
/// Transport retries before RETRY_EXC_ERR. 7 is the largest value, but rdma_rxe treats 7 as
/// infinite (it never decrements it), so a peer that stopped acknowledging would hang sends
/// forever; 6 is the largest value that is finite everywhere.
pub(super) const RETRY_COUNT: u8 = 6;
/// RNR retries: none.
pub(super) const RNR_RETRY: u8 = 0;

/// An RC QP owned by a link; destroyed (with `rdma_destroy_qp`) before its cm id, CQ and PD.
pub(super) struct Qp {
    raw: NonNull<ibv_qp>,
    max_inline: u32,
    // Dependencies, released after the QP is destroyed.
    id: Arc<CmId>,
    _cq: Arc<RawCq>,
    _pd: Arc<Pd>,
    _srq: Option<Arc<Srq>>,
}

// SAFETY: posting to and modifying a QP is thread-safe in libibverbs; the handle is only used
// through those calls, and destroyed in Drop with exclusive access.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    /// Creates the QP on `id` with `depth` send and receive WRs, its receives taken from
    /// `srq` if given (and then no receive WRs of its own).
    pub(super) fn new(
        id: Arc<CmId>,
        pd: &Arc<Pd>,
        cq: &Arc<RawCq>,
        depth: u32,
        srq: Option<&Arc<Srq>>,
    ) -> Result<Qp, Error> {
        let mut last = None;
        for inline in [INLINE_REQUEST, 0] {
            let mut attr = ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: cq.raw(),
                recv_cq: cq.raw(),
                srq: srq.map_or(std::ptr::null_mut(), |srq| srq.raw()),
                cap: ibv_qp_cap {
                    max_send_wr: depth,
                    max_recv_wr: if srq.is_some() { 0 } else { depth },
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                },
                qp_type: ibv_qp_type::IBV_QPT_RC,
                sq_sig_all: 0,
            };
            // SAFETY: the id is live and bound to the PD's device; the CQ, PD and SRQ are live
            // and outlive the QP (we hold Arcs); `attr` is valid and updated with the granted
            // caps.
            let ret = unsafe { rdma_create_qp(id.raw(), pd.raw(), &mut attr) };
            if ret == 0 {
                // SAFETY: on success librdmacm stored the new QP in the id.
                let raw = unsafe { (*id.raw()).qp };
                let raw = NonNull::new(raw).ok_or_else(|| errno_error("rdma_create_qp"))?;
                tracing::debug!(
                    depth,
                    max_inline = attr.cap.max_inline_data,
                    "verbs: QP created"
                );
                return Ok(Qp {
                    raw,
                    max_inline: attr.cap.max_inline_data,
                    id,
                    _cq: cq.clone(),
                    _pd: pd.clone(),
                    _srq: srq.cloned(),
                });
            }
            let err = errno_error("rdma_create_qp");
            tracing::debug!(inline, error = %err, "verbs: rdma_create_qp failed");
            last = Some(err);
        }
        Err(last.unwrap_or_else(|| errno_error("rdma_create_qp")))
    }

    pub(super) fn id(&self) -> &Arc<CmId> {
        &self.id
    }

    pub(super) fn max_inline(&self) -> u32 {
        self.max_inline
    }

    pub(super) fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live; qp_num is immutable.
        unsafe { self.raw.as_ref() }.qp_num
    }

    /// Posts one receive of `len` bytes at `addr`.
    pub(super) fn post_recv(
        &self,
        wr_id: u64,
        addr: u64,
        len: u32,
        lkey: u32,
    ) -> Result<(), Error> {
        post_one_recv("ibv_post_recv", wr_id, (addr, len, lkey), |wr, bad| {
            // SAFETY: the QP is live; `wr` and its scatter entry are valid for the call (the
            // provider copies them into the queue). The buffer [addr, addr+len) lies in a
            // region registered on this QP's PD that outlives the QP, and the caller hands its
            // ownership to the device.
            unsafe { rdma_sys::ibv_post_recv(self.raw.as_ptr(), wr, bad) }
        })
    }

    /// Posts `sends` in order, chained into lists of up to [`POST_CHAIN`] work requests: one
    /// `ibv_post_send` (one doorbell) per list. On an error, the requests before the failed
    /// one were posted.
    pub(super) fn post_sends(&self, sends: &[SendWr]) -> Result<(), Error> {
        for chunk in sends.chunks(POST_CHAIN) {
            let mut sges = [MaybeUninit::<ibv_sge>::uninit(); POST_CHAIN];
            let mut wrs = [const { MaybeUninit::<ibv_send_wr>::uninit() }; POST_CHAIN];
            let n = chunk.len();
            for (i, send) in chunk.iter().enumerate() {
                let sge = sges[i].write(ibv_sge {
                    addr: send.addr,
                    length: send.len,
                    lkey: send.lkey,
                });
                // SAFETY: ibv_send_wr is plain old data (pointers, integers, unions of
                // those); all-zero is a valid value.
                let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
                wr.wr_id = send.wr_id;
                wr.sg_list = sge;
                wr.num_sge = if send.len == 0 { 0 } else { 1 };
                wr.opcode = rdma_sys::ibv_wr_opcode::IBV_WR_SEND;
                wr.send_flags = send.flags;
                wrs[i].write(wr);
            }
            let base = wrs.as_mut_ptr().cast::<ibv_send_wr>();
            for i in 0..n - 1 {
                // SAFETY: entries 0..n were written above; `base.add(i + 1)` stays inside
                // the array, which outlives the call below.
                unsafe { (*base.add(i)).next = base.add(i + 1) };
            }
            let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
            // SAFETY: the QP is live; the n chained requests and their sges are initialized
            // and valid for the call (the last one's `next` is null from the zeroing). The
            // data lies in a region registered on this QP's PD that outlives the QP; the
            // caller keeps each slot unchanged until its completion (or the data is inline,
            // copied during the call).
            let ret = unsafe { rdma_sys::ibv_post_send(self.raw.as_ptr(), base, &mut bad) };
            if ret != 0 {
                return Err(status_error("ibv_post_send", ret));
            }
            super::stats::posted(n);
        }
        Ok(())
    }

    /// Sets `min_rnr_timer` (allowed RTS→RTS) and logs the attributes the QP ended up with.
    /// Call once the QP is in RTS (after accept / establishment).
    pub(super) fn tune_and_log(&self, port_active_mtu: Option<u32>) {
        // SAFETY: ibv_qp_attr is plain old data; all-zero is a valid value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.min_rnr_timer = MIN_RNR_TIMER;
        // SAFETY: the QP is live; `attr` is valid and only min_rnr_timer is selected.
        let ret = unsafe {
            ibv_modify_qp(
                self.raw.as_ptr(),
                &mut attr,
                ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0 as libc::c_int,
            )
        };
        if ret != 0 {
            tracing::warn!(
                error = %status_error("ibv_modify_qp(min_rnr_timer)", ret),
                "verbs: could not set min_rnr_timer"
            );
        }
        let attrs = match self.attributes() {
            Ok(attrs) => attrs,
            Err(e) => {
                tracing::debug!(error = %e, "verbs: QP query failed");
                return;
            }
        };
        tracing::debug!(
            qp_num = self.qp_num(),
            port_active_mtu = port_active_mtu.map(mtu_bytes),
            ?attrs,
            "verbs: QP attributes"
        );
        if attrs.rnr_retry != RNR_RETRY {
            tracing::warn!(
                rnr_retry = attrs.rnr_retry,
                "verbs: the device did not take rnr_retry 0; an RNR NAK will be retried"
            );
        }
        if let Some(active) = port_active_mtu.map(mtu_bytes) {
            if attrs.path_mtu > active {
                tracing::warn!(
                    path_mtu = attrs.path_mtu,
                    port_active_mtu = active,
                    "verbs: path MTU above the port's active MTU"
                );
            }
        }
    }

    /// The attributes the device reports for this QP.
    pub(super) fn attributes(&self) -> Result<QpAttributes, Error> {
        // SAFETY: both are plain old data; all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_CAP;
        // SAFETY: the QP is live; both out-parameters are valid and exclusively borrowed.
        let ret = unsafe {
            ibv_query_qp(
                self.raw.as_ptr(),
                &mut attr,
                mask.0 as libc::c_int,
                &mut init,
            )
        };
        if ret != 0 {
            return Err(status_error("ibv_query_qp", ret));
        }
        Ok(QpAttributes {
            state: attr.qp_state,
            path_mtu: mtu_bytes(attr.path_mtu),
            ack_timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
            max_rd_atomic: attr.max_rd_atomic,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr: attr.cap.max_recv_wr,
            max_inline_data: self.max_inline,
        })
    }
}

/// QP attributes as the device reports them (`ibv_query_qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttributes {
    /// `ibv_qp_state` (3 = RTS, 6 = ERR).
    pub state: u32,
    /// Path MTU in bytes.
    pub path_mtu: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^value).
    pub ack_timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (0: an RNR NAK is an error at once).
    pub rnr_retry: u8,
    /// `min_rnr_timer` encoding (12 = 0.64 ms; 0 would be 655 ms).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READs as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READs as responder.
    pub max_dest_rd_atomic: u8,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Inline limit granted at creation.
    pub max_inline_data: u32,
}

/// Bytes of an `ibv_mtu` value.
pub(super) fn mtu_bytes(mtu: u32) -> u32 {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: the QP belongs to `id` (created by rdma_create_qp on it), which is still
        // alive (we hold an Arc); no other reference to the QP remains. Destroying it discards
        // its outstanding work requests, so the device stops using the link's rings, which
        // are dropped after this.
        unsafe { rdma_destroy_qp(self.id.raw()) };
    }
}

//! A shared receive queue (`ibv_create_srq` / `ibv_destroy_srq`): receives posted once for
//! every QP attached to it; each QP takes the next posted receive for its next incoming SEND.

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::{ibv_create_srq, ibv_destroy_srq, ibv_srq, ibv_srq_attr};
use rdma_sys::{ibv_post_srq_recv, ibv_srq_init_attr};

use super::device::Pd;
use super::sys::{errno_error, post_one_recv, status_error};
use crate::Error;

/// An SRQ on a PD. Destroyed after every QP attached to it (each holds an `Arc` of it).
pub(super) struct Srq {
    raw: NonNull<ibv_srq>,
    _pd: Arc<Pd>,
}

// SAFETY: posting to an SRQ is thread-safe in libibverbs; the handle is only used through
// that call and QP creation, and destroyed in Drop with exclusive access.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Srq {
    /// An SRQ taking up to `depth` posted receives of one scatter entry each.
    pub(super) fn new(pd: &Arc<Pd>, depth: u32) -> Result<Srq, Error> {
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr: depth,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is live and outlives the SRQ (we hold an Arc); `attr` is valid for
        // the call.
        let raw = unsafe { ibv_create_srq(pd.raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| errno_error("ibv_create_srq"))?;
        tracing::debug!(depth, granted = attr.attr.max_wr, "verbs: SRQ created");
        Ok(Srq {
            raw,
            _pd: pd.clone(),
        })
    }

    pub(super) fn raw(&self) -> *mut ibv_srq {
        self.raw.as_ptr()
    }

    /// Posts one receive of `len` bytes at `addr`.
    pub(super) fn post_recv(
        &self,
        wr_id: u64,
        addr: u64,
        len: u32,
        lkey: u32,
    ) -> Result<(), Error> {
        post_one_recv("ibv_post_srq_recv", wr_id, (addr, len, lkey), |wr, bad| {
            // SAFETY: the SRQ is live; `wr` and its scatter entry are valid for the call (the
            // provider copies them). The buffer [addr, addr+len) lies in a region registered
            // on this SRQ's PD that outlives the SRQ, and the caller hands its ownership to
            // the device.
            unsafe { ibv_post_srq_recv(self.raw.as_ptr(), wr, bad) }
        })
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: the SRQ is ours; every QP attached to it held an Arc of it and is destroyed.
        let ret = unsafe { ibv_destroy_srq(self.raw.as_ptr()) };
        if ret != 0 {
            tracing::warn!(error = %status_error("ibv_destroy_srq", ret), "verbs: SRQ not destroyed");
        }
    }
}

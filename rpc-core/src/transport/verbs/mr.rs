//! Registered memory: one page-aligned allocation per ring, registered once with
//! `IBV_ACCESS_LOCAL_WRITE` only (no remote access; the rkey never leaves the process).

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::{ibv_access_flags, ibv_dereg_mr, ibv_mr, ibv_reg_mr};

use super::device::Pd;
use super::sys::{memlock_hint, status_error};
use crate::Error;

/// Alignment of ring memory (a page; keeps slots of power-of-two sizes from straddling pages
/// needlessly).
const ALIGN: usize = 4096;

/// A ring of `count` slots of `slot_size` bytes in one registered memory region.
pub(super) struct Region {
    mr: NonNull<ibv_mr>,
    ptr: NonNull<u8>,
    layout: Layout,
    slot_size: usize,
    count: u32,
    lkey: u32,
    pd: Arc<Pd>,
}

// SAFETY: the region is raw memory plus an MR handle. Who may touch which slot is decided by
// slot ownership (a slot is accessed through at most one VerbsRecv / VerbsSend at a time, and
// never while the device owns it); the handle is only used in thread-safe verbs calls.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` hands out slot pointers only through `unsafe` methods whose
// callers uphold the ownership rule.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates and registers `count` × `slot_size` bytes.
    pub(super) fn new(pd: &Arc<Pd>, count: u32, slot_size: u32) -> Result<Region, Error> {
        let slot_size = slot_size as usize;
        let len = (count as usize)
            .checked_mul(slot_size)
            .filter(|&len| len > 0)
            .ok_or_else(|| {
                Error::InvalidConfig(format!("a ring of {count} × {slot_size} bytes"))
            })?;
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|e| Error::InvalidConfig(format!("ring of {len} bytes: {e}")))?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("allocating a {len}-byte ring"),
            )));
        };
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as libc::c_int;
        // SAFETY: `ptr` points to `len` bytes we own and free only after ibv_dereg_mr; the PD
        // is live. Access is local write only.
        let mr = unsafe { ibv_reg_mr(pd.raw(), ptr.as_ptr().cast(), len, access) };
        let Some(mr) = NonNull::new(mr) else {
            let err = std::io::Error::last_os_error();
            // SAFETY: the allocation above, not registered, not shared.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            let reason = match err.raw_os_error() {
                Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => {
                    format!("{err}: {}", memlock_hint(len))
                }
                _ => err.to_string(),
            };
            return Err(Error::Verbs {
                call: "ibv_reg_mr",
                reason,
            });
        };
        // SAFETY: ibv_reg_mr returned a valid MR that we own.
        let lkey = unsafe { mr.as_ref() }.lkey;
        pd.count_registered(len as u64, true);
        Ok(Region {
            mr,
            ptr,
            layout,
            slot_size,
            count,
            lkey,
            pd: pd.clone(),
        })
    }

    pub(super) fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(super) fn slot_size(&self) -> usize {
        self.slot_size
    }

    pub(super) fn count(&self) -> u32 {
        self.count
    }

    /// Device address of slot `slot` (the virtual address, as registered).
    pub(super) fn slot_addr(&self, slot: u32) -> u64 {
        assert!(slot < self.count, "slot {slot} out of range");
        self.ptr.as_ptr() as u64 + u64::from(slot) * self.slot_size as u64
    }

    /// The bytes of slot `slot`.
    ///
    /// # Safety
    /// The caller must own the slot: the device does not own it (it is not posted), and no
    /// `&mut` to it exists for the returned lifetime.
    pub(super) unsafe fn slot(&self, slot: u32) -> &[u8] {
        assert!(slot < self.count, "slot {slot} out of range");
        // SAFETY: in bounds of our allocation (checked above); aliasing is the caller's
        // guarantee.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().add(slot as usize * self.slot_size),
                self.slot_size,
            )
        }
    }

    /// The bytes of slot `slot`, writable.
    ///
    /// # Safety
    /// The caller must own the slot exclusively: the device does not own it, and no other
    /// reference to it exists for the returned lifetime.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slot_mut(&self, slot: u32) -> &mut [u8] {
        assert!(slot < self.count, "slot {slot} out of range");
        // SAFETY: in bounds (checked above); exclusivity is the caller's guarantee.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.as_ptr().add(slot as usize * self.slot_size),
                self.slot_size,
            )
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the MR is ours. Its owner (a link) destroys the QP that used it first, so
        // the device no longer reads or writes this memory.
        let ret = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if ret != 0 {
            // The registration pins the pages; freeing them while still registered would let
            // the device write into memory the allocator hands out again. Leak instead.
            tracing::warn!(error = %status_error("ibv_dereg_mr", ret), "verbs: leaking a ring");
            return;
        }
        self.pd.count_registered(self.layout.size() as u64, false);
        // SAFETY: allocated in `new` with this layout, deregistered above, never freed before.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

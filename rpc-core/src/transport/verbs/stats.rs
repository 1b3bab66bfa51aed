//! Process-wide counts of the verbs calls on the data path, for `make bench`'s posts and
//! polls per message (`rpc-bench inproc --transport verbs`), and of the bytes registered:
//! statistics only, so each is a relaxed add, and nothing is decided from them.

use std::sync::atomic::{AtomicU64, Ordering};

static POSTS: AtomicU64 = AtomicU64::new(0);
static SENDS: AtomicU64 = AtomicU64::new(0);
static POLLS: AtomicU64 = AtomicU64::new(0);
static COMPLETIONS: AtomicU64 = AtomicU64::new(0);
static REGISTERED: AtomicU64 = AtomicU64::new(0);

/// What this process asked of its RDMA devices so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// `ibv_post_send` calls (each rings the doorbell once for a chain of SENDs).
    pub posts: u64,
    /// SEND work requests posted.
    pub sends: u64,
    /// `ibv_poll_cq` calls that returned at least one completion.
    pub polls: u64,
    /// Work completions those polls returned (sends and receives).
    pub completions: u64,
    /// Bytes registered with `ibv_reg_mr` now (receive and send rings, shared receive
    /// queues), by every endpoint of the process.
    pub registered_bytes: u64,
}

/// The counts so far.
pub fn verbs_stats() -> VerbsStats {
    VerbsStats {
        posts: POSTS.load(Ordering::Relaxed),
        sends: SENDS.load(Ordering::Relaxed),
        polls: POLLS.load(Ordering::Relaxed),
        completions: COMPLETIONS.load(Ordering::Relaxed),
        registered_bytes: REGISTERED.load(Ordering::Relaxed),
    }
}

/// One `ibv_post_send` of `sends` work requests.
pub(super) fn posted(sends: usize) {
    POSTS.fetch_add(1, Ordering::Relaxed);
    SENDS.fetch_add(sends as u64, Ordering::Relaxed);
}

/// One `ibv_poll_cq` that returned `completions` (counted when not 0).
pub(super) fn polled(completions: usize) {
    if completions > 0 {
        POLLS.fetch_add(1, Ordering::Relaxed);
        COMPLETIONS.fetch_add(completions as u64, Ordering::Relaxed);
    }
}

/// `bytes` registered (positive) or deregistered.
pub(super) fn registered(bytes: u64, registering: bool) {
    if registering {
        REGISTERED.fetch_add(bytes, Ordering::Relaxed);
    } else {
        REGISTERED.fetch_sub(bytes, Ordering::Relaxed);
    }
}

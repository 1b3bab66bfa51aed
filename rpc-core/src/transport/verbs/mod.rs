//! The RDMA transport: two-sided SENDs on RC queue pairs, connected through rdma_cm.
//!
//! This is the only module of the project with `unsafe` code. It sits directly on `rdma-sys`
//! (bindings to libibverbs and librdmacm) and wraps every verbs object in a small owner that
//! releases it in `Drop`.
//!
//! # Entry points
//!
//! * [`verbs_device_for`]: which RDMA device (if any) serves an address; the runtime's `Auto`
//!   transport choice.
//! * [`VerbsEndpoint::new`]: one per client or server. [`VerbsEndpoint::cq`] is the completion
//!   queue of all its links (one or more `ibv_cq` shards behind it); [`VerbsEndpoint::connect`] makes a client link,
//!   [`VerbsEndpoint::listen`] an [`Acceptor`](crate::transport::Acceptor) that assigns link ids.
//!
//! # Layers
//!
//! * **Ownership** (`sys`, `device`, `cq`, `qp`, `srq`, `mr`, `cm`): one owner per verbs object,
//!   which creates it, releases it in `Drop`, and wraps the calls made on it. No policy: these
//!   modules know nothing of links, keys or completions' meaning.
//! * **Policy**, which depends on ownership and never the reverse: `route` (which device
//!   serves an address), `wr_id` (what a work request's id encodes), `table` (link key → link, QP number → link key for shared
//!   receives, the side queues of closed links and of links a shared send slot is free for,
//!   the poller's wake-up), `shared_recv` (a server's shared receive queue and the credit
//!   pool granting its slots), `shared_send` (a server's shared send slots), `link` (rings,
//!   credits, sends; the buffers [`VerbsRecv`] and
//!   [`VerbsSend`]), `handle` ([`VerbsLink`]: the [`Link`](crate::transport::Link) over a
//!   link), `events` (the rdma_cm event thread), `completions` (work completions →
//!   [`Completion`](crate::transport::Completion)s; [`VerbsCq`]) and `endpoint` (connect,
//!   listen, accept).
//!
//! `scripts/check-modules` (part of `make test`) fails on an import cycle between them.
//!
//! # Ownership and drop order
//!
//! Each owner holds an `Arc` of what its verbs object depends on, so the dependencies outlive
//! it whatever order the last references go in:
//!
//! ```text
//! DeviceList (rdma_get_devices: pins librdmacm's device contexts; rdma_free_devices)
//!   └─ Device (an ibv_context of that list)
//!        ├─ Pd (ibv_alloc_pd / ibv_dealloc_pd)
//!        │    ├─ Region (aligned allocation + ibv_reg_mr, LOCAL_WRITE only / ibv_dereg_mr, free)
//!        │    └─ Srq (ibv_create_srq / ibv_destroy_srq)
//!        └─ CompChannel (ibv_create_comp_channel / ibv_destroy_comp_channel)
//!             └─ RawCq (ibv_create_cq / ack outstanding events, ibv_destroy_cq)
//! EventChannel (rdma_create_event_channel / rdma_destroy_event_channel)
//!   └─ CmId (rdma_create_id / rdma_destroy_id; holds the channel it currently reports on)
//! Qp (rdma_create_qp / rdma_destroy_qp) holds Arc<CmId>, Arc<RawCq>, Arc<Pd>, Arc<Srq> if any
//! SharedRecv: fields in drop order: Arc<Srq>, its Region, credit pool
//! SharedSend: fields in drop order: its Region, CQ reservation (of both shared pools)
//! LinkInner: fields in drop order: Qp, receive Region or Arc<SharedRecv>, send Region or
//!   Arc<SharedSend>, CQ reservation (none for shared rings), ...
//! ```
//!
//! So: QP before its cm id, CQ, PD and SRQ; an SRQ (each of its QPs holds an `Arc`, and
//! each link an `Arc` of its `SharedRecv`) before the region its receives point into; MRs
//! before the PD; CQ before its completion channel;
//! cm id before its event channel; everything before the device list. A link's QP is destroyed
//! before its rings are deregistered and freed, so the device never touches freed memory. The
//! receive buffers handed to the runtime ([`VerbsRecv`]) and free send slots ([`VerbsSend`])
//! hold an `Arc` of their link, so the ring memory outlives every one of them.
//!
//! # Safety arguments
//!
//! * **Handles.** Every raw pointer is owned by exactly one owner (or pinned by one, for device
//!   contexts), is non-null (`NonNull`), and is freed once, in `Drop`, after everything that
//!   used it (see above). libibverbs and librdmacm are thread-safe, which is why the owners are
//!   `Send + Sync`; the few calls that must not race on one cm id are serialized by
//!   construction (see `cm::CmId`).
//! * **Slot memory.** A slot is owned either by the device (posted) or by exactly one Rust
//!   value: a [`VerbsRecv`] (received, not yet re-posted) or a [`VerbsSend`] (allocated, not
//!   yet posted). References into a slot are handed out only through that value, so the device
//!   never writes memory that Rust code holds a reference to, and a send slot is not changed
//!   between post and completion (the `VerbsSend` is consumed by `post_send`; the slot returns
//!   to the free pool only when a completion covers it).
//! * **Work requests.** The work request and scatter/gather structs live on the stack for the
//!   duration of `ibv_post_*` (the provider copies them). wr_ids carry plain integers (link key,
//!   slot, direction), never pointers, so a stale completion of a released link is recognised
//!   by a failed table look-up and ignored.
//! * **Events.** rdma_cm events are copied and acknowledged at once (`rdma_destroy_id` waits
//!   for the acknowledgement of every event of its id); CQ events are acknowledged in batches
//!   and before `ibv_destroy_cq`.
//!
//! # QP attributes
//!
//! `rnr_retry` 0 (credits guarantee a posted receive, so one RNR NAK is an error that must
//! surface as `IBV_WC_RNR_RETRY_EXC_ERR`), `retry_cnt` 6 (7 means "forever" to Soft-RoCE), `min_rnr_timer` 12 (0.64 ms; rdma_cm
//! would leave 0 = 655 ms), no RDMA READ resources, path MTU as rdma_cm derives it from the
//! port (checked against the port's active MTU), inline sends up to the device's grant of 256
//! requested bytes, one send and one receive WR per slot. The values the QP ends up with are
//! logged at `debug` level ("verbs: QP attributes"). Details in the `qp` module.
//!
//! # What the runtime can rely on (and must handle)
//!
//! * Every link reports exactly one `Completion::Closed` (error completion, peer disconnect,
//!   device removal, or [`Link::close`](crate::transport::Link::close)), and nothing after
//!   it. Frames that arrived before a disconnect are reported before its `Closed`.
//! * Completions of a new link can be reported *before* `connect`/`accept` has returned it:
//!   the peer may send as soon as its side is established. A Recv for an unknown link id is a
//!   frame of a link about to be registered, not necessarily of one torn down.
//! * `Link::close` moves the QP to the error state at once: SENDs still in flight are flushed,
//!   not delivered. Close after the last frame's `SendDone` if it must arrive.
//! * The acceptor assigns link ids 1, 2, 3, ...; `connect` uses the caller's id. Do not mix
//!   both on one endpoint with overlapping ids.
//! * A dead or silent peer surfaces as `RETRY_EXC_ERR` after 6 retransmissions (about 14 s
//!   with the default ACK timeout on Soft-RoCE); a peer that sends without a credit surfaces as
//!   `RNR_RETRY_EXC_ERR` on its own side at the first RNR NAK.
//!
//! # Limits
//!
//! An endpoint uses one RDMA device (the one its first connection or listener resolved to).
//! Registered memory counts against `RLIMIT_MEMLOCK`: a link with rings of its own registers
//! two rings of `slot_count × slot_size` bytes; a link of a server's shared rings registers
//! nothing (the shared receive queue and send slots are registered once per endpoint); a
//! failed registration says so and shows the current `ulimit -l`. Completion queues hold at
//! most 32,767 entries each on rdma_rxe: a link with rings of its own reserves
//! `2 × slot_count` entries on a shard with room (a new shard when none has), and each receive
//! shard of a server's shared rings has a queue of its own, with an entry per slot of the shard
//! and per shared send slot, and none per link.

// Ownership: one RAII owner per verbs object and the calls made on it; no policy.
mod cm;
mod cq;
mod device;
mod mr;
mod qp;
mod srq;
mod stats;
mod sys;

// Policy: what the objects are used for. Depends on the ownership layer, never the reverse.
mod completions;
mod endpoint;
mod events;
mod handle;
mod link;
mod route;
mod shared_pools;
mod shared_recv;
mod shared_send;
mod table;
mod wr_id;

#[cfg(test)]
mod tests;

pub use completions::VerbsCq;
pub use endpoint::{VerbsAcceptor, VerbsEndpoint, HANDSHAKE_TIMEOUT};
pub use handle::VerbsLink;
pub use link::{VerbsRecv, VerbsSend};
pub use qp::QpAttributes;
pub use route::verbs_device_for;
pub use stats::{verbs_stats, VerbsStats};

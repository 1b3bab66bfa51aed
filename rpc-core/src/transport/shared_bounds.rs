//! Bounds the shared rings of both transports use (`SharedRings`, PROTOCOL.md §22.4): a leaf,
//! named by the verbs link and shards (which must not import transport/mod.rs), the TCP
//! server's shared slots and `SharedRings::validate`.

/// A verbs connection of shared rings signals at least every this many SENDs: an idle one
/// keeps at most one less of its shard's `sends_in_flight` (an unsignalled SEND is covered
/// only by a later completion), and one more at most that was kept for it while it waited.
pub(crate) const SHARED_SIGNAL_EVERY: u32 = 8;

/// Receive slots a pool of `slots` holds beyond those it grants (an eighth, at least 64):
/// room for what peers overrunning their credits send before their connections are closed.
pub(crate) fn headroom(slots: u32) -> u32 {
    (slots / 8).max(64)
}

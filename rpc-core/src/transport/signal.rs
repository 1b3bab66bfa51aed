//! How often a verbs connection of shared rings signals its SENDs: a leaf, named by the
//! verbs link (which must not import transport/mod.rs) and by `SharedRings::validate`.

/// A connection of shared rings signals at least every this many SENDs: an idle one keeps at
/// most one less of its shard's `sends_in_flight` (an unsignalled SEND is covered only by a
/// later completion), and one more at most that was kept for it while it waited.
pub(crate) const SHARED_SIGNAL_EVERY: u32 = 8;

//! The `wr_id` of every work request: plain integers, never pointers, so a completion of a
//! link already released is recognised by a failed look-up in the link table and ignored.
//!
//! bit 63: send (1) or receive (0); bits 32..63: the link's key in the endpoint's link table,
//! or [`shared_key`] of a shared receive queue for a receive posted to it (its link is then
//! the one whose QP the completion names); bits 0..32: the slot.

const SEND_BIT: u64 = 1 << 63;
/// Largest key (31 bits).
pub(super) const MAX_KEY: u32 = (1 << 31) - 1;
/// Most shared receive queues of an endpoint; the keys above `MAX_KEY - MAX_SHARED` are theirs.
pub(super) const MAX_SHARED: u32 = 1024;
/// Largest key of a link.
pub(super) const MAX_LINK_KEY: u32 = MAX_KEY - MAX_SHARED;

/// The key of receives posted to shared receive queue `index`: no link has it.
pub(super) fn shared_key(index: u32) -> u32 {
    debug_assert!(index < MAX_SHARED);
    MAX_KEY - index
}

/// The shared receive queue whose receives carry `key`, if it is such a key.
pub(super) fn shared_index(key: u32) -> Option<u32> {
    (key > MAX_LINK_KEY).then(|| MAX_KEY - key)
}

/// The wr_id of a send (`send`) or receive work request on `slot` of link `key`.
pub(super) fn wr_id(send: bool, key: u32, slot: u32) -> u64 {
    let kind = if send { SEND_BIT } else { 0 };
    kind | (u64::from(key & MAX_KEY) << 32) | u64::from(slot)
}

/// (is send, link key, slot).
pub(super) fn decode_wr_id(wr_id: u64) -> (bool, u32, u32) {
    (
        wr_id & SEND_BIT != 0,
        ((wr_id >> 32) as u32) & MAX_KEY,
        wr_id as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_wr_id_round_trips() {
        for (send, key, slot) in [(true, 0, 0), (false, MAX_KEY, u32::MAX), (true, 12345, 77)] {
            assert_eq!(decode_wr_id(wr_id(send, key, slot)), (send, key, slot));
        }
        for index in [0, 1, MAX_SHARED - 1] {
            assert_eq!(shared_index(shared_key(index)), Some(index));
        }
        assert_eq!(shared_index(MAX_LINK_KEY), None, "a link's key");
    }
}

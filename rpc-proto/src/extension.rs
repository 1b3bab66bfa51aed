//! Extensions of version 2 (`docs/PROTOCOL.md` §22), negotiated in band: a client's offer
//! is a PING whose value starts with `RP-X`, a server's acceptance the ACK that answers it
//! with `RP+X`. A peer that knows nothing of them echoes the offer, as §13 asks of any PING,
//! and so accepts nothing.

/// Bit 0: whole requests (§22.2), a one-message call opened in one frame with its metadata
/// ([`crate::flags::METADATA`]).
pub const WHOLE_REQUESTS: u32 = 0x1;

/// Bit 1: shared credits (§22.4), the server's grant of credits to the client varies above
/// its `slot_count` (a server accepts it when its receive slots are pooled).
pub const SHARED_CREDITS: u32 = 0x2;

/// Bit 2: keepalive pace (§22.5), the server tells the client how long a silence to wait
/// before it PINGs the server, so that a server's clients together PING it at a bounded rate.
pub const KEEPALIVE_PACE: u32 = 0x4;

/// The extensions this implementation speaks.
pub const SUPPORTED: u32 = WHOLE_REQUESTS | SHARED_CREDITS | KEEPALIVE_PACE;

/// The longest pace (in milliseconds) this implementation's client honours: a server that
/// announces more is taken to mean this much, so a dead server is still found within minutes.
pub const MAX_PACE_MS: u32 = 60_000;

/// The first four bytes of an offer's value on the wire.
const OFFER: [u8; 4] = *b"RP-X";
/// The first four bytes of an acceptance's value on the wire.
const ACCEPT: [u8; 4] = *b"RP+X";
/// The first four bytes of a pace's value on the wire.
const PACE: [u8; 4] = *b"RP-K";

/// A PING's value (its `call_id`) as bytes on the wire: `tag`, then `bits` little-endian.
fn value(tag: [u8; 4], bits: u32) -> u64 {
    let mut wire = [0u8; 8];
    wire[..4].copy_from_slice(&tag);
    wire[4..].copy_from_slice(&bits.to_le_bytes());
    u64::from_le_bytes(wire)
}

/// The bits of a value that starts with `tag`.
fn bits(tag: [u8; 4], value: u64) -> Option<u32> {
    let wire = value.to_le_bytes();
    (wire[..4] == tag).then(|| u32::from_le_bytes([wire[4], wire[5], wire[6], wire[7]]))
}

/// The PING value of a client's offer of `bits`.
pub fn offer(bits: u32) -> u64 {
    value(OFFER, bits)
}

/// The ACK value of a server's acceptance of `bits`.
pub fn acceptance(bits: u32) -> u64 {
    value(ACCEPT, bits)
}

/// The bits a PING value offers, if it is an offer.
pub fn offered(value: u64) -> Option<u32> {
    bits(OFFER, value)
}

/// The bits an ACK value accepts, if it is an acceptance (an echoed offer is not).
pub fn accepted(value: u64) -> Option<u32> {
    bits(ACCEPT, value)
}

/// The PING value of a server's keepalive pace of `millis` milliseconds (§22.5).
pub fn pace(millis: u32) -> u64 {
    value(PACE, millis)
}

/// The milliseconds a PING value announces, if it is a pace.
pub fn paced(value: u64) -> Option<u32> {
    bits(PACE, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_the_protocol_writes_them() {
        // §22.1: `52 50 2D 58`, then the bits little-endian.
        assert_eq!(offer(1).to_le_bytes(), [0x52, 0x50, 0x2d, 0x58, 1, 0, 0, 0]);
        assert_eq!(
            acceptance(1).to_le_bytes(),
            [0x52, 0x50, 0x2b, 0x58, 1, 0, 0, 0]
        );
        assert_eq!(offered(offer(5)), Some(5));
        // §22.5: `52 50 2D 4B`, then the milliseconds little-endian.
        assert_eq!(
            pace(20_000).to_le_bytes(),
            [0x52, 0x50, 0x2d, 0x4b, 0x20, 0x4e, 0, 0]
        );
        assert_eq!(paced(pace(20_000)), Some(20_000));
        assert_eq!(paced(offer(4)), None);
        assert_eq!(accepted(acceptance(0)), Some(0));
        // A peer without extensions echoes the offer: that accepts nothing.
        assert_eq!(accepted(offer(1)), None);
        assert_eq!(offered(7), None);
    }
}

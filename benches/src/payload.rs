//! Request payloads: pseudo-random bytes of the requested size, with the call's sequence
//! number stamped into the first 8 bytes so that no two requests are alike and every reply
//! can be checked against the request it answers without keeping a copy of it.
//!
//! ```
//! use rpc_benches::payload::Payload;
//!
//! let payload = Payload::new(64);
//! let request = payload.request(7);
//! assert_eq!(request.len(), 64);
//! assert!(payload.matches(7, &request));
//! assert!(!payload.matches(8, &request));
//! ```

/// The payload pattern of one run.
#[derive(Debug, Clone)]
pub struct Payload {
    base: Vec<u8>,
}

/// Bytes of the sequence-number stamp (fewer when the payload is smaller).
const STAMP: usize = 8;

impl Payload {
    /// A pattern of `size` bytes (xorshift64 output, the same in every run).
    pub fn new(size: usize) -> Payload {
        let mut base = vec![0u8; size];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for chunk in base.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        Payload { base }
    }

    /// Payload size in bytes.
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Whether the payload is empty (size 0).
    pub fn is_empty(&self) -> bool {
        self.base.is_empty()
    }

    /// The pattern without a stamp.
    pub fn base(&self) -> &[u8] {
        &self.base
    }

    /// A fresh request payload for call `seq`.
    pub fn request(&self, seq: u64) -> Vec<u8> {
        let mut v = self.base.clone();
        stamp(seq, &mut v);
        v
    }

    /// Stamps `seq` into `buf`, which must hold the pattern (e.g. a reused send buffer).
    pub fn stamp_into(&self, seq: u64, buf: &mut [u8]) {
        stamp(seq, buf);
    }

    /// Whether `reply` equals the request payload of call `seq`.
    pub fn matches(&self, seq: u64, reply: &[u8]) -> bool {
        if reply.len() != self.base.len() {
            return false;
        }
        let n = reply.len().min(STAMP);
        reply[..n] == seq.to_le_bytes()[..n] && reply[n..] == self.base[n..]
    }
}

fn stamp(seq: u64, buf: &mut [u8]) {
    let n = buf.len().min(STAMP);
    buf[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_empty_payloads() {
        let p = Payload::new(3);
        assert!(p.matches(0x0001_0203, &p.request(0x0001_0203)));
        assert!(!p.matches(1, &p.request(2)));
        let empty = Payload::new(0);
        assert!(empty.is_empty());
        assert!(empty.matches(5, &[]));
        assert!(!empty.matches(5, &[0]));
    }

    #[test]
    fn detects_a_changed_byte() {
        let p = Payload::new(4096);
        let mut r = p.request(9);
        r[4000] ^= 1;
        assert!(!p.matches(9, &r));
    }
}

//! Metadata blocks (`docs/PROTOCOL.md` §8): the payload of HEADERS and END frames. A block is a
//! sequence of entries, each `u16 name_len, name, u32 value_len, value` (little-endian), with
//! no padding and no count; an empty block has no entries.

use crate::frame::violation;
use crate::Error;
use crate::Violation;

/// The status message of a server's END (percent-encoded as gRPC does).
pub const GRPC_MESSAGE: &str = "grpc-message";
/// The serialized `google.rpc.Status` details of a server's END.
pub const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";

/// Whether `name` is a valid metadata name: 1 to 255 bytes of `0-9 a-z - _ .`.
pub fn valid_name(name: &[u8]) -> bool {
    (1..=255).contains(&name.len())
        && name
            .iter()
            .all(|&b| b.is_ascii_digit() || b.is_ascii_lowercase() || b"-_.".contains(&b))
}

/// Whether `value` is valid for `name`: anything for `-bin` names, printable ASCII
/// (0x20..=0x7E) otherwise.
pub fn valid_value(name: &[u8], value: &[u8]) -> bool {
    name.ends_with(b"-bin") || value.iter().all(|&b| (0x20..=0x7e).contains(&b))
}

/// Whether `name` is reserved for the protocol (`grpc-` prefix).
pub fn is_reserved(name: &str) -> bool {
    name.starts_with("grpc-")
}

/// Bytes one entry takes in a block.
pub fn entry_len(name: &str, value: &[u8]) -> usize {
    2 + name.len() + 4 + value.len()
}

/// Appends one entry. The caller checked the name and value (see [`valid_name`]).
pub fn push_entry(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    debug_assert!(valid_name(name.as_bytes()) && valid_value(name.as_bytes(), value));
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// The entries of a block, checked on the way: a malformed entry ends the iteration with an
/// error ([`Violation::MalformedMetadata`]).
pub fn entries(block: &[u8]) -> Entries<'_> {
    Entries { rest: block }
}

/// Checks a whole block; returns its entry count.
pub fn validate(block: &[u8]) -> Result<usize, Error> {
    let mut n = 0;
    for entry in entries(block) {
        entry?;
        n += 1;
    }
    Ok(n)
}

/// Iterator over the `(name, value)` entries of a block; see [`entries`].
pub struct Entries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(&'a str, &'a [u8]), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let result = self.take();
        if result.is_err() {
            self.rest = &[];
        }
        Some(result)
    }
}

impl<'a> Entries<'a> {
    fn take(&mut self) -> Result<(&'a str, &'a [u8]), Error> {
        let bad = |what: &str| violation(Violation::MalformedMetadata, what.to_string());
        let rest = self.rest;
        if rest.len() < 2 {
            return Err(bad("truncated name length"));
        }
        let name_len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        let name = rest
            .get(2..2 + name_len)
            .ok_or_else(|| bad("truncated name"))?;
        if !valid_name(name) {
            return Err(bad(
                "name is empty, longer than 255 bytes or not [0-9a-z-_.]",
            ));
        }
        let at = 2 + name_len;
        let len_bytes = rest
            .get(at..at + 4)
            .ok_or_else(|| bad("truncated value length"))?;
        let value_len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        let value = rest
            .get(at + 4..)
            .and_then(|r| r.get(..value_len))
            .ok_or_else(|| bad("truncated value"))?;
        if !valid_value(name, value) {
            return Err(bad("value of a non-`-bin` name is not printable ASCII"));
        }
        self.rest = &rest[at + 4 + value_len..];
        let name = std::str::from_utf8(name).expect("checked ASCII");
        Ok((name, value))
    }
}

/// Percent-encodes a status message for `grpc-message`, as gRPC does over HTTP/2: bytes
/// outside 0x20..=0x7E and `%` itself become `%XX`.
pub fn percent_encode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// Decodes `grpc-message`; malformed escapes are kept as they are, invalid UTF-8 is replaced.
pub fn percent_decode(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if value[i] == b'%' && i + 2 < value.len() {
            if let (Some(h), Some(l)) = (hex(value[i + 1]), hex(value[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip() {
        let mut block = Vec::new();
        push_entry(&mut block, "x-user", b"alice");
        push_entry(&mut block, "trace-bin", &[0, 255, 10]);
        assert_eq!(
            block.len(),
            entry_len("x-user", b"alice") + entry_len("trace-bin", &[0; 3])
        );
        let got: Vec<_> = entries(&block).map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![("x-user", &b"alice"[..]), ("trace-bin", &[0, 255, 10][..])]
        );
        assert_eq!(validate(&[]).unwrap(), 0);
    }

    #[test]
    fn malformed_blocks_are_violations() {
        let mut good = Vec::new();
        push_entry(&mut good, "k", b"v");
        for cut in 1..good.len() {
            assert!(validate(&good[..cut]).is_err(), "truncated at {cut}");
        }
        let mut upper = Vec::new();
        upper.extend_from_slice(&1u16.to_le_bytes());
        upper.push(b'K');
        upper.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            validate(&upper),
            Err(Error::Protocol {
                violation: Violation::MalformedMetadata,
                ..
            })
        ));
        let mut control = Vec::new();
        control.extend_from_slice(&1u16.to_le_bytes());
        control.push(b'k');
        control.extend_from_slice(&1u32.to_le_bytes());
        control.push(b'\n');
        assert!(validate(&control).is_err(), "newline in an ASCII value");
        let mut empty_name = Vec::new();
        empty_name.extend_from_slice(&0u16.to_le_bytes());
        empty_name.extend_from_slice(&0u32.to_le_bytes());
        assert!(validate(&empty_name).is_err());
    }

    #[test]
    fn status_messages_are_percent_encoded() {
        let encoded = percent_encode("100% café\n");
        assert_eq!(encoded, b"100%25 caf%C3%A9%0A");
        assert_eq!(percent_decode(&encoded), "100% café\n");
        assert_eq!(percent_decode(b"50%"), "50%");
        assert_eq!(percent_decode(b"%zz"), "%zz");
    }
}

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

/// The bytes a metadata name may hold: `0-9 a-z - _ .` (one table look-up per byte).
const NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, b'-' | b'_' | b'.');
        b += 1;
    }
    table
};

/// [`NAME_BYTES`] with the upper-case letters too, for names that are lower-cased when sent.
const NAME_BYTES_ANY_CASE: [bool; 256] = {
    let mut table = NAME_BYTES;
    let mut b = b'A';
    while b <= b'Z' {
        table[b as usize] = true;
        b += 1;
    }
    table
};

/// [`NAME_BYTES_ANY_CASE`] as the byte each stands for in a name on the wire (upper case
/// lowered), and 0 for every byte a name may not hold.
const LOWERED_NAME_BYTES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        if NAME_BYTES_ANY_CASE[b] {
            table[b] = (b as u8).to_ascii_lowercase();
        }
        b += 1;
    }
    table
};

/// Whether `b` may be part of a metadata name (`0-9 a-z - _ .`).
pub fn name_byte(b: u8) -> bool {
    NAME_BYTES[usize::from(b)]
}

/// Whether `b`, lower-cased, may be part of a metadata name (`0-9 a-z A-Z - _ .`): one table
/// look per byte for a name an application gives in any case.
pub fn name_byte_any_case(b: u8) -> bool {
    NAME_BYTES_ANY_CASE[usize::from(b)]
}

/// Each byte's class in a name an application gives: 0 for a byte a name holds as it is,
/// [`UPPER`] for an upper-case letter, [`NOT_IN_NAMES`] for a byte no name may hold. The
/// classes of a name's bytes or-ed together say what the name is.
const NAME_CLASS: [u8; 256] = {
    let mut table = [NOT_IN_NAMES; 256];
    let mut b = 0;
    while b < 256 {
        if NAME_BYTES[b] {
            table[b] = 0;
        } else if (b as u8).is_ascii_uppercase() {
            table[b] = UPPER;
        }
        b += 1;
    }
    table
};
const UPPER: u8 = 1;
const NOT_IN_NAMES: u8 = 2;

/// What a name an application gives is, found in one pass over its bytes ([`name_kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// 1 to 255 bytes of `0-9 a-z - _ .`: a valid name as it is.
    Lower,
    /// A valid name once lower-cased: it has upper-case letters.
    Mixed,
    /// Empty, longer than 255 bytes, or holding a byte no name may hold.
    Invalid,
}

/// What `name` is: valid as it is, valid once lower-cased, or invalid. One table look per
/// byte, without an early exit (valid names are the rule, and the loop then unrolls).
#[inline(always)]
pub fn name_kind(name: &[u8]) -> NameKind {
    let classes = name
        .iter()
        .fold(0, |classes, &b| classes | NAME_CLASS[usize::from(b)]);
    if !(1..=255).contains(&name.len()) || classes & NOT_IN_NAMES != 0 {
        NameKind::Invalid
    } else if classes & UPPER != 0 {
        NameKind::Mixed
    } else {
        NameKind::Lower
    }
}

/// Whether `name` is a valid metadata name: 1 to 255 bytes of `0-9 a-z - _ .`.
pub fn valid_name(name: &[u8]) -> bool {
    name_kind(name) == NameKind::Lower
}

/// Whether `value` is valid for `name`: anything for `-bin` names, printable ASCII
/// (0x20..=0x7E) otherwise.
pub fn valid_value(name: &[u8], value: &[u8]) -> bool {
    name.ends_with(b"-bin") || printable(value)
}

/// Whether every byte is printable ASCII (0x20..=0x7E), what an ASCII value may hold; eight
/// bytes at a time, the last eight of a value that is not a multiple of eight read as a
/// word too (they overlap the word before, which a second look does not change).
pub fn printable(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let tail = match bytes.len() {
        0..8 => return bytes.iter().all(|&b| b.wrapping_sub(0x20) < 0x5f),
        len if len % 8 == 0 => None,
        len => bytes[len - 8..].first_chunk::<8>(),
    };
    words
        .map(|word| word.first_chunk::<8>().expect("8 bytes"))
        .chain(tail)
        .all(|word| printable_word(u64::from_le_bytes(*word)))
}

/// Whether the eight bytes of `x` are printable ASCII.
#[inline(always)]
fn printable_word(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte below 0x20 borrows into its high bit; one above 0x7E carries into it when 1
    // is added (0x7F + 1 = 0x80), or has it set already: either way a high bit shows.
    let below = x.wrapping_sub(ONES * 0x20) & !x;
    let above = x.wrapping_add(ONES) | x;
    (below | above) & HIGHS == 0
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

/// Appends one entry for a name an application gave in any case, lower-cased as it is
/// written, and checks it on the way: the name's bytes and length, the `grpc-` prefix it
/// may not have, the `-bin` suffix it has exactly when `binary`, and an ASCII value's bytes.
/// On `false` nothing was appended. One pass over the name, one copy of the value.
#[inline]
pub fn push_checked_entry(out: &mut Vec<u8>, name: &str, value: &[u8], binary: bool) -> bool {
    let fits = (1..=255).contains(&name.len()) && u32::try_from(value.len()).is_ok();
    if !fits || !(binary || printable(value)) {
        return false;
    }
    let start = out.len();
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    let mut refused = false;
    out.extend(name.bytes().map(|b| {
        let lowered = LOWERED_NAME_BYTES[usize::from(b)];
        refused |= lowered == 0;
        lowered
    }));
    let lowered = &out[start + 2..];
    let ok = !refused && !lowered.starts_with(b"grpc-") && lowered.ends_with(b"-bin") == binary;
    if !ok {
        out.truncate(start);
        return false;
    }
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
    true
}

/// The entries of a block, checked on the way: a malformed entry ends the iteration with an
/// error ([`Violation::MalformedMetadata`]).
pub fn entries(block: &[u8]) -> Entries<'_> {
    Entries { rest: block }
}

/// The entries of a block already checked (one this side built, or one [`validate`]
/// passed), read without checking their bytes again. Reading stops at the first entry that
/// does not parse, which a checked block does not have.
pub fn checked_entries(block: &[u8]) -> impl Iterator<Item = (&str, &[u8])> {
    checked_raw_entries(block)
        .map_while(|(name, value)| Some((std::str::from_utf8(name).ok()?, value)))
}

/// Whether a checked block holds a reserved (`grpc-`) entry.
pub fn has_reserved(block: &[u8]) -> bool {
    checked_raw_entries(block).any(|(name, _)| name.starts_with(b"grpc-"))
}

/// The entries of a checked block with their names as bytes (see [`checked_entries`]): for
/// looking a name up without reading it as UTF-8.
pub fn checked_raw_entries(block: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut rest = block;
    std::iter::from_fn(move || {
        let (name, value, after) = split_entry(rest)?;
        rest = after;
        Some((name, value))
    })
}

/// The first entry of `rest` as its name, its value and what follows it; `None` if the
/// lengths overrun `rest`. Nothing else is checked.
#[inline(always)]
fn split_entry(rest: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (name_len, rest) = rest.split_first_chunk::<2>()?;
    let (name, rest) = rest.split_at_checked(usize::from(u16::from_le_bytes(*name_len)))?;
    let (value_len, rest) = rest.split_first_chunk::<4>()?;
    let (value, rest) = rest.split_at_checked(u32::from_le_bytes(*value_len) as usize)?;
    Some((name, value, rest))
}

/// Checks a whole block; returns its entry count. One pass with no error built on the way:
/// only a block that fails is read again, by [`Entries`], to say why.
pub fn validate(block: &[u8]) -> Result<usize, Error> {
    let mut rest = block;
    let mut n = 0;
    while !rest.is_empty() {
        match split_entry(rest) {
            Some((name, value, after)) if valid_name(name) && valid_value(name, value) => {
                rest = after;
                n += 1;
            }
            _ => return Err(why_invalid(rest)),
        }
    }
    Ok(n)
}

/// Why the first entry of `rest` is not valid.
#[cold]
#[inline(never)]
fn why_invalid(rest: &[u8]) -> Error {
    match entries(rest).take_raw() {
        Err(err) => err,
        Ok(_) => violation(
            Violation::MalformedMetadata,
            "an entry both failed and passed its checks".to_string(),
        ),
    }
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
        let (name, value) = self.take_raw()?;
        Ok((std::str::from_utf8(name).expect("checked ASCII"), value))
    }

    /// The next entry, checked, with its name as bytes (no UTF-8 look: it is ASCII).
    fn take_raw(&mut self) -> Result<(&'a [u8], &'a [u8]), Error> {
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
    fn a_name_byte_in_any_case_is_its_lower_case_byte() {
        for b in 0..=255u8 {
            assert_eq!(
                name_byte_any_case(b),
                name_byte(b.to_ascii_lowercase()),
                "{b:#04x}"
            );
        }
    }

    #[test]
    fn the_name_table_admits_exactly_the_name_bytes() {
        for b in 0..=255u8 {
            let expected = b.is_ascii_digit() || b.is_ascii_lowercase() || b"-_.".contains(&b);
            assert_eq!(valid_name(&[b]), expected, "byte {b:#04x}");
            let printable = (0x20..=0x7e).contains(&b);
            assert_eq!(valid_value(b"x", &[b]), printable, "value byte {b:#04x}");
        }
        // Eight bytes at a time: each byte value at each place of values of every length
        // up to three words (short ones, whole words, and tails read as overlapping words).
        for b in 0..=255u8 {
            let printable = (0x20..=0x7e).contains(&b);
            for len in 1..=24 {
                for at in 0..len {
                    let mut value = [b'a'; 24];
                    value[at] = b;
                    assert_eq!(
                        valid_value(b"x", &value[..len]),
                        printable,
                        "byte {b:#04x} at {at} of {len}"
                    );
                }
            }
        }
        assert!(printable(b""));
        assert!(!valid_name(b""));
        assert!(!valid_name(&[b'a'; 256]));
        assert!(valid_value(b"x-bin", &[0, 0xff]));
    }

    #[test]
    fn name_kind_sorts_names_as_the_byte_tables_do() {
        for b in 0..=255u8 {
            let expected = if !name_byte_any_case(b) {
                NameKind::Invalid
            } else if b.is_ascii_uppercase() {
                NameKind::Mixed
            } else {
                NameKind::Lower
            };
            // Alone, and at each place of a longer name (the loop unrolls by four).
            assert_eq!(name_kind(&[b]), expected, "byte {b:#04x}");
            for at in 0..9 {
                let mut name = [b'a'; 9];
                name[at] = b;
                assert_eq!(name_kind(&name), expected, "byte {b:#04x} at {at}");
            }
        }
        assert_eq!(name_kind(b"X-Request-Id"), NameKind::Mixed);
        assert_eq!(name_kind(b"x-request-id"), NameKind::Lower);
        assert_eq!(name_kind(b"x request"), NameKind::Invalid);
        assert_eq!(name_kind(b""), NameKind::Invalid);
        assert_eq!(name_kind(&[b'a'; 255]), NameKind::Lower);
        assert_eq!(name_kind(&[b'a'; 256]), NameKind::Invalid);
    }

    #[test]
    fn validate_says_what_the_checking_iterator_says() {
        let mut good = Vec::new();
        push_entry(&mut good, "x-user", b"alice");
        let mut bad_value = good.clone();
        push_entry(&mut bad_value, "k", b"ok");
        let at = bad_value.len() - 1;
        bad_value[at] = b'\n';
        let mut bad_name = good.clone();
        push_entry(&mut bad_name, "k", b"v");
        bad_name[good.len() + 2] = b'K';
        for block in [&bad_value[..], &bad_name[..], &good[..good.len() - 1]] {
            let expected = entries(block).find_map(Result::err).expect("a bad entry");
            let got = validate(block).expect_err("a bad block");
            assert_eq!(got.to_string(), expected.to_string());
        }
        assert_eq!(validate(&good).unwrap(), 1);
    }

    #[test]
    fn checked_entries_read_what_was_pushed_and_stop_at_a_cut() {
        let mut block = Vec::new();
        push_entry(&mut block, "x-user", b"alice");
        push_entry(&mut block, "trace-bin", &[0, 255, 10]);
        let got: Vec<_> = checked_entries(&block).collect();
        assert_eq!(
            got,
            vec![("x-user", &b"alice"[..]), ("trace-bin", &[0, 255, 10][..])]
        );
        assert_eq!(checked_entries(&block[..block.len() - 1]).count(), 1);
    }

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

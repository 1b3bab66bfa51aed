//! [`MetadataMap`]: a call's custom metadata (request headers, response headers, trailers),
//! as gRPC has it: lower-case names, printable-ASCII values, and binary values under names
//! ending in `-bin`. Names starting with `grpc-` are reserved for the protocol.

use std::cell::Cell;

use crate::protocol::v2::metadata as wire;
use crate::Error;

/// Metadata entries in the order they were added; a name may repeat.
///
/// ```
/// use rpc_core::MetadataMap;
/// let mut md = MetadataMap::new();
/// md.insert("x-request-id", "42").unwrap();
/// md.insert_bin("trace-bin", &[0xab, 0xcd]).unwrap();
/// assert_eq!(md.get("x-request-id"), Some("42"));
/// assert_eq!(md.get_bin("trace-bin"), Some(&[0xab, 0xcd][..]));
/// assert!(md.insert("Bad Name", "x").is_err());
/// ```
#[derive(Clone, Default)]
pub struct MetadataMap {
    /// The entries as the wire's metadata block (`docs/PROTOCOL.md` §10), every one checked:
    /// one buffer for them all, sent as it is and filled from a received block with one copy.
    /// Empty (no allocation) while there are none, what most calls carry.
    block: Vec<u8>,
}

/// Bytes a map reserves for its entries at its first insertion.
const FIRST_BLOCK: usize = 128;

/// The largest buffer a thread keeps for its next map ([`SPARE_BLOCK`]).
const SPARE_LIMIT: usize = 1024;

thread_local! {
    /// The buffer of the last map this thread dropped (at most [`SPARE_LIMIT`] bytes): a
    /// thread making call after call with metadata, or a poller handing each request its
    /// metadata, reuses it instead of allocating one per call.
    static SPARE_BLOCK: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// An empty buffer with room for `len` bytes: the thread's spare if it has one.
fn block_with_capacity(len: usize) -> Vec<u8> {
    let mut block = SPARE_BLOCK.with(Cell::take);
    block.reserve(len);
    block
}

impl Drop for MetadataMap {
    // Inlined: most maps are empty, and their drop is one comparison where they die.
    #[inline(always)]
    fn drop(&mut self) {
        if self.block.capacity() != 0 {
            spare_block(std::mem::take(&mut self.block));
        }
    }
}

/// Leaves a dropped map's buffer to its thread, unless the thread has one or it is large.
#[inline(never)]
fn spare_block(mut block: Vec<u8>) {
    if block.capacity() <= SPARE_LIMIT {
        block.clear();
        SPARE_BLOCK.with(|spare| {
            let held = spare.take();
            spare.set(if held.capacity() == 0 { block } else { held });
        });
    }
}

impl std::fmt::Debug for MetadataMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataMap")
            .field("entries", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

impl PartialEq for MetadataMap {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for MetadataMap {}

impl MetadataMap {
    /// An empty map (no allocation).
    pub const fn new() -> Self {
        MetadataMap { block: Vec::new() }
    }

    /// Sets `key` to the ASCII `value`, replacing earlier values. Keys are lower-cased.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.replace(key, value.as_bytes(), false)
    }

    /// Adds an ASCII `value` for `key`, keeping earlier ones.
    pub fn append(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.add(key, value.as_bytes(), false)
    }

    /// Sets the binary `key` (its name must end in `-bin`) to `value`, replacing earlier
    /// values.
    pub fn insert_bin(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.replace(key, value, true)
    }

    /// Adds a binary `value` for `key` (ending in `-bin`), keeping earlier ones.
    pub fn append_bin(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.add(key, value, true)
    }

    /// [`MetadataMap::add`], the earlier values of `key` removed first; an invalid entry
    /// leaves them.
    fn replace(&mut self, key: &str, value: &[u8], binary: bool) -> Result<(), Error> {
        if self.contains_key(key) {
            check(key, value, binary)?;
            self.remove(key);
        }
        self.add(key, value, binary)
    }

    /// Appends an entry, lower-casing the key, checked as it is written (one pass over the
    /// name); an invalid one is refused with the reason [`check`] gives.
    fn add(&mut self, key: &str, value: &[u8], binary: bool) -> Result<(), Error> {
        if self.block.capacity() == 0 {
            // Room for a few entries at the first: one allocation for what a call usually
            // carries, or none with the thread's spare.
            self.block = block_with_capacity(wire::entry_len(key, value).max(FIRST_BLOCK));
        }
        if wire::push_checked_entry(&mut self.block, key, value, binary) {
            return Ok(());
        }
        Err(check(key, value, binary)
            .err()
            .unwrap_or_else(|| Error::InvalidMetadata(format!("`{key}`: too long a value"))))
    }

    /// The first ASCII value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        if key.ends_with("-bin") {
            return None;
        }
        self.get_raw(key).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The first binary value of `key` (a `-bin` name).
    pub fn get_bin(&self, key: &str) -> Option<&[u8]> {
        if !key.ends_with("-bin") {
            return None;
        }
        self.get_raw(key)
    }

    fn get_raw(&self, key: &str) -> Option<&[u8]> {
        wire::checked_raw_entries(&self.block)
            .find(|(k, _)| k.eq_ignore_ascii_case(key.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Every value of `key`, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        wire::checked_raw_entries(&self.block)
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Removes every value of `key`; returns whether there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        if !self.contains_key(key) {
            return false;
        }
        self.block = retained(&self.block, |name| !name.eq_ignore_ascii_case(key));
        true
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get_raw(key).is_some()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.block.is_empty()
    }

    /// The entries as `(name, value)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        wire::checked_entries(&self.block)
    }

    /// Appends every entry of `other`.
    pub fn extend(&mut self, mut other: MetadataMap) {
        if self.block.is_empty() {
            std::mem::swap(&mut self.block, &mut other.block);
        } else {
            self.block.extend_from_slice(&other.block);
        }
    }

    /// The entries as the wire's metadata block (`docs/PROTOCOL.md` §8).
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.block.clone()
    }

    /// [`MetadataMap::encode`] without a copy, for a map that is done with.
    pub(crate) fn into_block(mut self) -> Vec<u8> {
        std::mem::take(&mut self.block)
    }

    /// The block itself, without a copy (see [`MetadataMap::encode`]).
    pub(crate) fn as_block(&self) -> &[u8] {
        &self.block
    }

    /// The custom entries of a validated block (the reserved `grpc-` ones are left out).
    pub(crate) fn from_block(block: &[u8]) -> MetadataMap {
        if block.is_empty() {
            return MetadataMap::new();
        }
        let block = if wire::has_reserved(block) {
            retained(block, |name| !wire::is_reserved(name))
        } else {
            let mut copy = block_with_capacity(block.len());
            copy.extend_from_slice(block);
            copy
        };
        MetadataMap { block }
    }

    /// Adds an entry another protocol delivered (the gRPC face's HTTP/2 headers), checked
    /// like [`MetadataMap::append`]; invalid or reserved ones are skipped.
    pub fn append_raw(&mut self, key: &str, value: &[u8]) -> bool {
        self.add(key, value, key.ends_with("-bin")).is_ok()
    }
}

/// The entries of the checked `block` whose names `keep` accepts, as a block of their own.
fn retained(block: &[u8], keep: impl Fn(&str) -> bool) -> Vec<u8> {
    let mut kept = Vec::with_capacity(block.len());
    for (name, value) in wire::checked_entries(block).filter(|(name, _)| keep(name)) {
        wire::push_entry(&mut kept, name, value);
    }
    kept
}

/// Whether `key` (lower-cased) and `value` may be sent, without building the lower-cased key.
fn check(key: &str, value: &[u8], binary: bool) -> Result<(), Error> {
    let bad = |why: &str| {
        Err(Error::InvalidMetadata(format!(
            "`{}`: {why}",
            key.to_ascii_lowercase()
        )))
    };
    let name_ok = (1..=255).contains(&key.len()) && key.bytes().all(wire::name_byte_any_case);
    if !name_ok {
        return bad("names are 1 to 255 characters of 0-9 a-z - _ .");
    }
    let starts = |prefix: &str| {
        key.len() >= prefix.len()
            && key.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    };
    if starts("grpc-") {
        return bad("names starting with `grpc-` are reserved");
    }
    let ends_bin = key.len() >= 4 && key.as_bytes()[key.len() - 4..].eq_ignore_ascii_case(b"-bin");
    if binary != ends_bin {
        return bad(if binary {
            "binary values need a name ending in `-bin`"
        } else {
            "names ending in `-bin` take binary values (insert_bin)"
        });
    }
    if !binary && !wire::printable(value) {
        return bad("ASCII values are printable characters (0x20 to 0x7E)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_wire_block() {
        let mut md = MetadataMap::new();
        md.insert("X-Mixed-Case", "v1").unwrap();
        md.append("x-mixed-case", "v2").unwrap();
        md.insert_bin("blob-bin", &[0, 255, 10]).unwrap();
        let back = MetadataMap::from_block(&md.encode());
        assert_eq!(back, md);
        assert_eq!(back.get_all("x-mixed-case").count(), 2);
        assert_eq!(back.get("x-mixed-case"), Some("v1"));
        assert_eq!(back.get_bin("blob-bin"), Some(&[0, 255, 10][..]));
    }

    #[test]
    fn a_thread_reuses_the_buffer_of_a_map_it_dropped() {
        std::thread::spawn(|| {
            let filled = || {
                let mut md = MetadataMap::new();
                md.insert("x-request-id", "42").unwrap();
                md
            };
            let (first, second) = (filled(), filled());
            let kept = first.as_block().as_ptr();
            drop(first);
            // The thread keeps one spare: the second buffer goes back to the allocator.
            drop(second);
            let again = filled();
            assert_eq!(again.as_block().as_ptr(), kept, "the spare was reused");
            assert_eq!(again.get("x-request-id"), Some("42"));
            let from_wire = MetadataMap::from_block(again.as_block());
            drop(again);
            assert_eq!(from_wire.get("x-request-id"), Some("42"));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_one_pass_check_agrees_with_the_reasons_given() {
        let names = [
            "x-id", "X-Id", "grpc-x", "GRPC-x", "a-bin", "A-BIN", "", "a b", "a:b", "é", "_.-09",
        ];
        let long = "n".repeat(256);
        let values: [&[u8]; 4] = [b"v", b"", b"a\nb", &[0xff, 0]];
        for name in names.iter().copied().chain([long.as_str()]) {
            for value in values {
                for binary in [false, true] {
                    let mut block = Vec::new();
                    let written = wire::push_checked_entry(&mut block, name, value, binary);
                    assert_eq!(
                        written,
                        check(name, value, binary).is_ok(),
                        "{name:?} {value:?}"
                    );
                    assert_eq!(written, !block.is_empty());
                }
            }
        }
    }

    #[test]
    fn refuses_what_cannot_cross_the_wire() {
        let mut md = MetadataMap::new();
        assert!(md.insert("grpc-status", "0").is_err(), "reserved");
        assert!(md.insert("x-ctl", "a\nb").is_err(), "control character");
        assert!(md.insert("x-bin", "text").is_err(), "-bin takes bytes");
        assert!(md.insert_bin("x-text", b"v").is_err(), "bytes need -bin");
        assert!(md.insert("", "v").is_err());
        assert!(md.is_empty());
    }
}

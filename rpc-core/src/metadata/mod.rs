//! A call's custom metadata, in tonic's shapes: [`MetadataMap`] (request headers, response
//! headers, trailers), [`MetadataValue`] and [`MetadataKey`] of the two kinds, [`Ascii`]
//! (printable-ASCII values) and [`Binary`] (any bytes, under names ending in `-bin`). Names are
//! lower-case; those starting with `grpc-` are reserved for the protocol.

use std::cell::Cell;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::protocol::v2::metadata as wire;
#[cfg(test)]
use crate::Error;

mod value;

pub use value::{
    AsMetadataKey, Ascii, AsciiMetadataKey, AsciiMetadataValue, Binary, BinaryMetadataKey,
    BinaryMetadataValue, IntoMetadataKey, MetadataKey, MetadataValue, ValueEncoding,
};

/// Metadata entries in the order they were added; a name may repeat.
///
/// ```
/// use rpc_core::metadata::{MetadataMap, MetadataValue};
/// let mut md = MetadataMap::new();
/// md.insert("x-request-id", "42".parse().unwrap());
/// md.insert_bin("trace-bin", MetadataValue::from_bytes(&[0xab, 0xcd]));
/// assert_eq!(md.get("x-request-id").unwrap(), "42");
/// assert_eq!(md.get_bin("trace-bin").unwrap().to_bytes().unwrap().as_ref(), &[0xab, 0xcd]);
/// assert_eq!(md.get("absent"), None);
/// ```
#[derive(Clone, Default)]
pub struct MetadataMap {
    /// `None` (nothing allocated, one word to move) while there are no entries, what most
    /// calls carry.
    stored: Option<Box<Stored>>,
}

/// What a map with entries holds.
#[derive(Clone)]
struct Stored {
    /// The entries as the wire's metadata block (`docs/PROTOCOL.md` §10), every one checked:
    /// one buffer for them all, sent as it is and filled from a received block with one copy.
    block: Vec<u8>,
    /// The entries as [`MetadataValue`]s, made at the first lookup (which returns references
    /// to them, as tonic's does) and dropped at any change: one copy of the block, shared by
    /// them all. Calls whose metadata nobody looks up never make it.
    values: OnceLock<Box<[Entry]>>,
}

/// One entry of a map's looked-up form: where its name is in the block, and its value.
#[derive(Clone, Debug)]
struct Entry {
    name: std::ops::Range<usize>,
    value: EntryValue,
}

#[derive(Clone, Debug)]
enum EntryValue {
    Ascii(MetadataValue<Ascii>),
    Binary(MetadataValue<Binary>),
}

/// Bytes a map reserves for its entries at its first insertion.
const FIRST_BLOCK: usize = 128;

/// The largest buffer a thread keeps for its next map ([`SPARE`]).
const SPARE_LIMIT: usize = 1024;

thread_local! {
    /// What the last map this thread dropped held (its buffer at most [`SPARE_LIMIT`] bytes):
    /// a thread making call after call with metadata, or a poller handing each request its
    /// metadata, reuses it instead of allocating per call.
    static SPARE: Cell<Option<Box<Stored>>> = const { Cell::new(None) };
}

/// An empty [`Stored`] with room for `len` bytes: the thread's spare if it has one.
fn stored_with_capacity(len: usize) -> Box<Stored> {
    // `try_with`: a map made or dropped by another thread-local's destructor, after this
    // one's, goes without the spare.
    let spare = SPARE.try_with(Cell::take).ok().flatten();
    let mut stored = spare.unwrap_or_else(|| {
        Box::new(Stored {
            block: Vec::new(),
            values: OnceLock::new(),
        })
    });
    stored.block.reserve(len);
    stored
}

impl Drop for MetadataMap {
    // Inlined: most maps are empty, and their drop is one comparison where they die.
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(stored) = self.stored.take() {
            spare(stored);
        }
    }
}

/// Leaves a dropped map's storage to its thread, unless the thread has some with a buffer or
/// this buffer is large.
#[inline(never)]
fn spare(mut stored: Box<Stored>) {
    if stored.block.capacity() <= SPARE_LIMIT {
        stored.block.clear();
        stored.values.take();
        let _ = SPARE.try_with(|spare| {
            let held = spare.take();
            spare.set(match held {
                Some(held) if held.block.capacity() != 0 => Some(held),
                _ => Some(stored),
            });
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
        MetadataMap { stored: None }
    }

    /// The entries as the wire's block.
    fn block(&self) -> &[u8] {
        self.stored.as_deref().map_or(&[], |stored| &stored.block)
    }

    /// The storage, to change it (with room for `len` more bytes at least at its first
    /// change); the looked-up form is dropped.
    fn changing(&mut self, len: usize) -> &mut Stored {
        let stored = self
            .stored
            .get_or_insert_with(|| stored_with_capacity(len.max(FIRST_BLOCK)));
        stored.values.take();
        stored
    }

    /// Sets `key` to the ASCII `value`, replacing earlier values; returns the first of them.
    ///
    /// # Panics
    ///
    /// A `&'static str` key that is not a valid name of ASCII entries (as tonic's does):
    /// see [`MetadataKey::from_bytes`].
    #[inline(always)]
    pub fn insert<K: IntoMetadataKey<Ascii>>(
        &mut self,
        key: K,
        value: MetadataValue<Ascii>,
    ) -> Option<MetadataValue<Ascii>> {
        self.replace(key.into_metadata_key(), value)
    }

    /// Adds an ASCII `value` for `key`, keeping earlier ones; returns whether there were any.
    ///
    /// # Panics
    ///
    /// As [`MetadataMap::insert`].
    #[inline]
    pub fn append<K: IntoMetadataKey<Ascii>>(
        &mut self,
        key: K,
        value: MetadataValue<Ascii>,
    ) -> bool {
        self.add(key.into_metadata_key(), value)
    }

    /// Sets the binary `key` (ending in `-bin`) to `value`, replacing earlier values; returns
    /// the first of them.
    ///
    /// # Panics
    ///
    /// A `&'static str` key that is not a valid name of binary entries.
    #[inline]
    pub fn insert_bin<K: IntoMetadataKey<Binary>>(
        &mut self,
        key: K,
        value: MetadataValue<Binary>,
    ) -> Option<MetadataValue<Binary>> {
        self.replace(key.into_metadata_key(), value)
    }

    /// Adds a binary `value` for `key` (ending in `-bin`), keeping earlier ones; returns
    /// whether there were any.
    ///
    /// # Panics
    ///
    /// As [`MetadataMap::insert_bin`].
    #[inline]
    pub fn append_bin<K: IntoMetadataKey<Binary>>(
        &mut self,
        key: K,
        value: MetadataValue<Binary>,
    ) -> bool {
        self.add(key.into_metadata_key(), value)
    }

    /// [`MetadataMap::insert`] and [`MetadataMap::insert_bin`]: the earlier values of `key`
    /// go, the first returned. Out of line: the callers are inlined (see `insert`).
    #[inline(never)]
    fn replace<VE: ValueEncoding>(
        &mut self,
        key: MetadataKey<VE>,
        value: MetadataValue<VE>,
    ) -> Option<MetadataValue<VE>> {
        let earlier = self.remove_first(key.as_str());
        self.push(key.as_str(), value.bytes());
        earlier
    }

    /// [`MetadataMap::append`] and [`MetadataMap::append_bin`]: whether `key` had values.
    #[inline(never)]
    fn add<VE: ValueEncoding>(&mut self, key: MetadataKey<VE>, value: MetadataValue<VE>) -> bool {
        let had = self.contains_key(key.as_str());
        self.push(key.as_str(), value.bytes());
        had
    }

    /// Appends a checked entry to the block, and drops the looked-up form.
    fn push(&mut self, key: &str, value: &[u8]) {
        // Room for a few entries at the first: one allocation for what a call usually
        // carries, or none with the thread's spare.
        let stored = self.changing(wire::entry_len(key, value));
        wire::push_entry(&mut stored.block, key, value);
    }

    /// Removes every value of `key` (whose names are of kind `VE`), returning the first.
    fn remove_first<VE: ValueEncoding>(&mut self, key: &str) -> Option<MetadataValue<VE>> {
        let first = self.get_raw(key)?;
        let first = MetadataValue::copied(first);
        let stored = self.changing(0);
        stored.block = retained(&stored.block, |name| !name.eq_ignore_ascii_case(key));
        Some(first)
    }

    /// The first ASCII value of `key`.
    pub fn get<K: AsMetadataKey<Ascii>>(&self, key: K) -> Option<&MetadataValue<Ascii>> {
        self.get_all(key).iter().next()
    }

    /// The first binary value of `key` (a `-bin` name).
    pub fn get_bin<K: AsMetadataKey<Binary>>(&self, key: K) -> Option<&MetadataValue<Binary>> {
        self.get_all_bin(key).iter().next()
    }

    /// Every ASCII value of `key`, in order (tonic's `GetAll`: `iter()`, or iterate it).
    pub fn get_all<K: AsMetadataKey<Ascii>>(&self, key: K) -> GetAll<'_, Ascii> {
        self.named(key)
    }

    /// Every binary value of `key`, in order.
    pub fn get_all_bin<K: AsMetadataKey<Binary>>(&self, key: K) -> GetAll<'_, Binary> {
        self.named(key)
    }

    /// The entries named `key` (any case), from the looked-up form.
    fn named<VE: ValueEncoding, K: AsMetadataKey<VE>>(&self, key: K) -> GetAll<'_, VE> {
        let block = self.block();
        let entries = self.looked_up();
        let key = key.as_metadata_name().as_bytes();
        let first = entries
            .iter()
            .position(|e| block[e.name.clone()].eq_ignore_ascii_case(key));
        GetAll {
            block,
            entries: first.map_or(&[][..], |at| &entries[at..]),
            kind: std::marker::PhantomData,
        }
    }

    /// The entries as values, made at the first call after a change.
    fn looked_up(&self) -> &[Entry] {
        let Some(stored) = self.stored.as_deref() else {
            return &[];
        };
        stored.values.get_or_init(|| {
            let block = &stored.block;
            let shared = Bytes::copy_from_slice(block);
            let base = block.as_ptr() as usize;
            wire::checked_raw_entries(block)
                .map(|(name, value)| {
                    let name_at = name.as_ptr() as usize - base;
                    let value_at = value.as_ptr() as usize - base;
                    let bytes = shared.slice(value_at..value_at + value.len());
                    Entry {
                        name: name_at..name_at + name.len(),
                        value: if name.ends_with(b"-bin") {
                            EntryValue::Binary(MetadataValue::from_checked(bytes))
                        } else {
                            EntryValue::Ascii(MetadataValue::from_checked(bytes))
                        },
                    }
                })
                .collect()
        })
    }

    fn get_raw(&self, key: &str) -> Option<&[u8]> {
        wire::checked_raw_entries(self.block())
            .find(|(k, _)| k.eq_ignore_ascii_case(key.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Removes every ASCII value of `key`; returns the first.
    pub fn remove<K: AsMetadataKey<Ascii>>(&mut self, key: K) -> Option<MetadataValue<Ascii>> {
        self.remove_of_kind(key.as_metadata_name())
    }

    /// Removes every binary value of `key`; returns the first.
    pub fn remove_bin<K: AsMetadataKey<Binary>>(
        &mut self,
        key: K,
    ) -> Option<MetadataValue<Binary>> {
        self.remove_of_kind(key.as_metadata_name())
    }

    /// [`MetadataMap::remove`] and [`MetadataMap::remove_bin`]: nothing if `key` names
    /// entries of the other kind.
    fn remove_of_kind<VE: ValueEncoding>(&mut self, key: &str) -> Option<MetadataValue<VE>> {
        if binary_name(key) != VE::BINARY {
            return None;
        }
        self.remove_first(key)
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
        self.block().is_empty()
    }

    /// The entries as `(name, value)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        wire::checked_entries(self.block())
    }

    /// Appends every entry of `other`.
    pub fn extend(&mut self, mut other: MetadataMap) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            std::mem::swap(&mut self.stored, &mut other.stored);
        } else {
            self.changing(0).block.extend_from_slice(other.block());
        }
    }

    /// The entries as the wire's metadata block (`docs/PROTOCOL.md` §8).
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.block().to_vec()
    }

    /// [`MetadataMap::encode`] without a copy, for a map that is done with.
    pub(crate) fn into_block(mut self) -> Vec<u8> {
        self.stored.take().map_or(Vec::new(), |mut stored| {
            let block = std::mem::take(&mut stored.block);
            spare(stored);
            block
        })
    }

    /// The block itself, without a copy (see [`MetadataMap::encode`]).
    pub(crate) fn as_block(&self) -> &[u8] {
        self.block()
    }

    /// The custom entries of a validated block (the reserved `grpc-` ones are left out).
    pub(crate) fn from_block(block: &[u8]) -> MetadataMap {
        if block.is_empty() {
            return MetadataMap::new();
        }
        let mut stored = stored_with_capacity(block.len());
        if wire::has_reserved(block) {
            retain_into(&mut stored.block, block, |name| !wire::is_reserved(name));
        } else {
            stored.block.extend_from_slice(block);
        }
        MetadataMap {
            stored: Some(stored),
        }
    }

    /// Adds an entry another protocol delivered (the gRPC face's HTTP/2 headers), checked
    /// like [`MetadataMap::append`]; invalid or reserved ones are skipped.
    pub fn append_raw(&mut self, key: &str, value: &[u8]) -> bool {
        let stored = self.changing(wire::entry_len(key, value));
        wire::push_checked_entry(&mut stored.block, key, value, binary_name(key))
    }
}

/// The values of one name in a [`MetadataMap`] ([`MetadataMap::get_all`]), tonic's shape:
/// `iter()`, or iterate it.
#[derive(Debug)]
pub struct GetAll<'a, VE: ValueEncoding> {
    block: &'a [u8],
    /// The entries from the first of the name on (empty if it has none).
    entries: &'a [Entry],
    kind: std::marker::PhantomData<VE>,
}

impl<'a, VE: ValueEncoding> GetAll<'a, VE> {
    /// The values, in order.
    pub fn iter(&self) -> ValueIter<'a, VE> {
        ValueIter {
            block: self.block,
            name: self.entries.first().map(|e| &self.block[e.name.clone()]),
            entries: self.entries.iter(),
            kind: std::marker::PhantomData,
        }
    }
}

impl<'a, VE: ValueEncoding> IntoIterator for GetAll<'a, VE>
where
    ValueIter<'a, VE>: Iterator,
{
    type Item = <ValueIter<'a, VE> as Iterator>::Item;
    type IntoIter = ValueIter<'a, VE>;

    fn into_iter(self) -> ValueIter<'a, VE> {
        self.iter()
    }
}

impl<'a, VE: ValueEncoding> IntoIterator for &GetAll<'a, VE>
where
    ValueIter<'a, VE>: Iterator,
{
    type Item = <ValueIter<'a, VE> as Iterator>::Item;
    type IntoIter = ValueIter<'a, VE>;

    fn into_iter(self) -> ValueIter<'a, VE> {
        self.iter()
    }
}

/// The iterator of a [`GetAll`].
#[derive(Debug)]
pub struct ValueIter<'a, VE: ValueEncoding> {
    block: &'a [u8],
    name: Option<&'a [u8]>,
    entries: std::slice::Iter<'a, Entry>,
    kind: std::marker::PhantomData<VE>,
}

impl<'a, VE: ValueEncoding> ValueIter<'a, VE> {
    /// The next entry of the name.
    fn next_entry(&mut self) -> Option<&'a EntryValue> {
        let name = self.name?;
        let block = self.block;
        self.entries
            .by_ref()
            .find(|e| block[e.name.clone()].eq_ignore_ascii_case(name))
            .map(|e| &e.value)
    }
}

impl<'a> Iterator for ValueIter<'a, Ascii> {
    type Item = &'a MetadataValue<Ascii>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_entry()? {
                EntryValue::Ascii(value) => return Some(value),
                EntryValue::Binary(_) => continue,
            }
        }
    }
}

impl<'a> Iterator for ValueIter<'a, Binary> {
    type Item = &'a MetadataValue<Binary>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_entry()? {
                EntryValue::Binary(value) => return Some(value),
                EntryValue::Ascii(_) => continue,
            }
        }
    }
}

/// Whether `name` (any case) names binary entries.
fn binary_name(name: &str) -> bool {
    name.len() >= 4 && name.as_bytes()[name.len() - 4..].eq_ignore_ascii_case(b"-bin")
}

/// The entries of the checked `block` whose names `keep` accepts, as a block of their own.
fn retained(block: &[u8], keep: impl Fn(&str) -> bool) -> Vec<u8> {
    let mut kept = Vec::with_capacity(block.len());
    retain_into(&mut kept, block, keep);
    kept
}

/// Appends to `out` the entries of the checked `block` whose names `keep` accepts.
fn retain_into(out: &mut Vec<u8>, block: &[u8], keep: impl Fn(&str) -> bool) {
    for (name, value) in wire::checked_entries(block).filter(|(name, _)| keep(name)) {
        wire::push_entry(out, name, value);
    }
}

/// Whether `key` (lower-cased) and `value` may be sent, and if not, why.
#[cfg(test)]
fn check(key: &str, value: &[u8], binary: bool) -> Result<(), Error> {
    value::check_name(key.as_bytes(), binary)?;
    if !binary && !wire::printable(value) {
        return Err(Error::InvalidMetadata(format!(
            "`{}`: ASCII values are printable characters (0x20 to 0x7E)",
            key.to_ascii_lowercase()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_wire_block() {
        let mut md = MetadataMap::new();
        assert_eq!(md.insert("X-Mixed-Case", "v1".parse().unwrap()), None);
        assert!(md.append("x-mixed-case", "v2".parse().unwrap()));
        md.insert_bin("blob-bin", MetadataValue::from_bytes(&[0, 255, 10]));
        let back = MetadataMap::from_block(&md.encode());
        assert_eq!(back, md);
        assert_eq!(back.get_all("x-mixed-case").iter().count(), 2);
        let all: Vec<_> = back.get_all("X-Mixed-Case").into_iter().collect();
        assert_eq!(all, ["v1", "v2"]);
        assert_eq!(back.get_all("absent").iter().count(), 0);
        // A binary entry is not removed as an ASCII one, whatever the case of its name.
        let mut copy = back.clone();
        assert!(copy.remove("BLOB-BIN").is_none());
        assert_eq!(copy.remove_bin("BLOB-BIN").unwrap(), [0, 255, 10][..]);
        assert_eq!(back.get("X-MIXED-CASE").unwrap(), "v1");
        assert_eq!(back.get_bin("blob-bin").unwrap(), &[0, 255, 10][..]);
        // The kinds do not mix.
        assert!(back.get("blob-bin").is_none());
        assert!(back.get_bin("x-mixed-case").is_none());
    }

    #[test]
    fn lookups_see_every_change() {
        let mut md = MetadataMap::new();
        md.insert("x-a", MetadataValue::from_static("1"));
        assert_eq!(md.get("x-a").unwrap(), "1");
        assert_eq!(md.insert("x-a", "2".parse().unwrap()).unwrap(), "1");
        assert_eq!(md.get("x-a").unwrap(), "2");
        md.append("x-b", 3.into());
        assert_eq!(md.get("x-b").unwrap(), "3");
        assert_eq!(md.remove("x-a").unwrap(), "2");
        assert!(md.get("x-a").is_none());
        let mut more = MetadataMap::new();
        more.insert("x-c", MetadataValue::from_static("4"));
        md.extend(more);
        assert_eq!(md.get("x-c").unwrap(), "4");
        assert!(md.append_raw("x-d", b"5"));
        assert!(!md.append_raw("x-e", b"\n"));
        assert_eq!(md.get("x-d").unwrap(), "5");
        assert_eq!(md.len(), 3);
    }

    #[test]
    fn a_thread_reuses_the_buffer_of_a_map_it_dropped() {
        std::thread::spawn(|| {
            let filled = || {
                let mut md = MetadataMap::new();
                md.insert("x-request-id", MetadataValue::from_static("42"));
                md
            };
            let (first, second) = (filled(), filled());
            let kept = first.as_block().as_ptr();
            drop(first);
            // The thread keeps one spare: the second buffer goes back to the allocator.
            drop(second);
            let again = filled();
            assert_eq!(again.as_block().as_ptr(), kept, "the spare was reused");
            assert_eq!(again.get("x-request-id").unwrap(), "42");
            let from_wire = MetadataMap::from_block(again.as_block());
            drop(again);
            assert_eq!(from_wire.get("x-request-id").unwrap(), "42");
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
        assert!(
            "grpc-status".parse::<AsciiMetadataKey>().is_err(),
            "reserved"
        );
        assert!(
            "a\nb".parse::<AsciiMetadataValue>().is_err(),
            "control character"
        );
        assert!(
            "x-bin".parse::<AsciiMetadataKey>().is_err(),
            "-bin takes bytes"
        );
        assert!(
            "x-text".parse::<BinaryMetadataKey>().is_err(),
            "bytes need -bin"
        );
        assert!("".parse::<AsciiMetadataKey>().is_err());
        let mut md = MetadataMap::new();
        assert!(!md.append_raw("grpc-status", b"0"));
        assert!(!md.append_raw("x-bad", b"\x01"));
        assert!(md.is_empty());
    }

    #[test]
    #[should_panic(expected = "invalid metadata name")]
    fn a_static_name_that_cannot_be_sent_panics_as_tonics_does() {
        MetadataMap::new().insert("x-bin", MetadataValue::from_static("text"));
    }
}

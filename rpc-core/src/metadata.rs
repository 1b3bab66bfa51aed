//! [`MetadataMap`]: a call's custom metadata (request headers, response headers, trailers),
//! as gRPC has it: lower-case names, printable-ASCII values, and binary values under names
//! ending in `-bin`. Names starting with `grpc-` are reserved for the protocol.

use crate::protocol::v2::metadata as wire;
use crate::Error;

/// The entries of a [`MetadataMap`]: names and values, in order.
type Entries = Vec<(String, Vec<u8>)>;

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
    /// `None` while there are none: an empty map, what most calls carry, is one word that
    /// every request, response and status moves around, and allocates nothing.
    entries: Option<Box<Entries>>,
}

impl std::fmt::Debug for MetadataMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataMap")
            .field("entries", &self.list())
            .finish()
    }
}

impl PartialEq for MetadataMap {
    fn eq(&self, other: &Self) -> bool {
        self.list() == other.list()
    }
}

impl Eq for MetadataMap {}

impl MetadataMap {
    /// An empty map (no allocation).
    pub const fn new() -> Self {
        MetadataMap { entries: None }
    }

    fn list(&self) -> &[(String, Vec<u8>)] {
        self.entries.as_deref().map_or(&[], Vec::as_slice)
    }

    fn list_mut(&mut self) -> &mut Entries {
        self.entries.get_or_insert_with(Box::default)
    }

    /// Sets `key` to the ASCII `value`, replacing earlier values. Keys are lower-cased.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let key = checked(key, value.as_bytes(), false)?;
        self.remove(&key);
        self.list_mut().push((key, value.as_bytes().to_vec()));
        Ok(())
    }

    /// Adds an ASCII `value` for `key`, keeping earlier ones.
    pub fn append(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let key = checked(key, value.as_bytes(), false)?;
        self.list_mut().push((key, value.as_bytes().to_vec()));
        Ok(())
    }

    /// Sets the binary `key` (its name must end in `-bin`) to `value`, replacing earlier
    /// values.
    pub fn insert_bin(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        let key = checked(key, value, true)?;
        self.remove(&key);
        self.list_mut().push((key, value.to_vec()));
        Ok(())
    }

    /// Adds a binary `value` for `key` (ending in `-bin`), keeping earlier ones.
    pub fn append_bin(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        let key = checked(key, value, true)?;
        self.list_mut().push((key, value.to_vec()));
        Ok(())
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
        self.list()
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_slice())
    }

    /// Every value of `key`, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.list()
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_slice())
    }

    /// Removes every value of `key`; returns whether there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        let Some(entries) = self.entries.as_mut() else {
            return false;
        };
        let before = entries.len();
        entries.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        entries.len() != before
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get_raw(key).is_some()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.list().len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.list().is_empty()
    }

    /// The entries as `(name, value)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.list().iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Appends every entry of `other`.
    pub fn extend(&mut self, other: MetadataMap) {
        if let Some(entries) = other.entries {
            match &mut self.entries {
                Some(mine) => mine.extend(*entries),
                None => self.entries = Some(entries),
            }
        }
    }

    /// The entries as the wire's metadata block (`docs/PROTOCOL.md` §8).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut block = Vec::with_capacity(self.encoded_len());
        for (k, v) in self.list() {
            wire::push_entry(&mut block, k, v);
        }
        block
    }

    /// Bytes of [`MetadataMap::encode`].
    pub(crate) fn encoded_len(&self) -> usize {
        self.list().iter().map(|(k, v)| wire::entry_len(k, v)).sum()
    }

    /// The custom entries of a validated block (the reserved `grpc-` ones are left out).
    pub(crate) fn from_block(block: &[u8]) -> MetadataMap {
        let entries: Vec<_> = wire::entries(block)
            .flatten()
            .filter(|(k, _)| !wire::is_reserved(k))
            .map(|(k, v)| (k.to_owned(), v.to_vec()))
            .collect();
        MetadataMap {
            entries: (!entries.is_empty()).then(|| Box::new(entries)),
        }
    }

    /// Adds an entry another protocol delivered (the gRPC face's HTTP/2 headers), checked
    /// like [`MetadataMap::append`]; invalid or reserved ones are skipped.
    pub fn append_raw(&mut self, key: &str, value: &[u8]) -> bool {
        match checked(key, value, key.ends_with("-bin")) {
            Ok(key) => {
                self.list_mut().push((key, value.to_vec()));
                true
            }
            Err(_) => false,
        }
    }
}

/// The lower-cased `key`, if it and `value` may be sent.
fn checked(key: &str, value: &[u8], binary: bool) -> Result<String, Error> {
    let key = key.to_ascii_lowercase();
    let bad = |why: &str| Err(Error::InvalidMetadata(format!("`{key}`: {why}")));
    if !wire::valid_name(key.as_bytes()) {
        return bad("names are 1 to 255 characters of 0-9 a-z - _ .");
    }
    if wire::is_reserved(&key) {
        return bad("names starting with `grpc-` are reserved");
    }
    if binary != key.ends_with("-bin") {
        return bad(if binary {
            "binary values need a name ending in `-bin`"
        } else {
            "names ending in `-bin` take binary values (insert_bin)"
        });
    }
    if !wire::valid_value(key.as_bytes(), value) {
        return bad("ASCII values are printable characters (0x20 to 0x7E)");
    }
    Ok(key)
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

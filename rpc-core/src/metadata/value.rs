//! [`MetadataValue`] and [`MetadataKey`], tonic's types for a metadata entry's value and
//! name, checked when they are made: an ASCII value is printable ASCII, a binary one any bytes;
//! a name is lower-case `0-9 a-z - _ .`, ends in `-bin` exactly when its values are binary,
//! and does not start with the protocol's `grpc-`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use bytes::Bytes;

use crate::protocol::v2::metadata as wire;
use crate::Error;
use wire::NameKind;

mod sealed {
    pub trait Sealed {}
}

/// The two kinds of metadata: [`Ascii`] values (printable ASCII text) and [`Binary`] ones
/// (any bytes, under names ending in `-bin`).
pub trait ValueEncoding: sealed::Sealed + Send + Sync + 'static {
    /// Whether values of this kind are binary.
    const BINARY: bool;
}

/// Printable ASCII metadata (0x20 to 0x7E), under names not ending in `-bin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ascii {}

/// Binary metadata, under names ending in `-bin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {}

impl sealed::Sealed for Ascii {}
impl sealed::Sealed for Binary {}

impl ValueEncoding for Ascii {
    const BINARY: bool = false;
}

impl ValueEncoding for Binary {
    const BINARY: bool = true;
}

/// An ASCII value, tonic's alias.
pub type AsciiMetadataValue = MetadataValue<Ascii>;
/// A binary value, tonic's alias.
pub type BinaryMetadataValue = MetadataValue<Binary>;
/// The name of ASCII entries, tonic's alias.
pub type AsciiMetadataKey = MetadataKey<Ascii>;
/// The name of binary entries, tonic's alias.
pub type BinaryMetadataKey = MetadataKey<Binary>;

/// A metadata value, checked for its kind when made: `"42".parse()?`,
/// `MetadataValue::from_static("Bearer x")`, `MetadataValue::try_from(text)?`, `42.into()`;
/// binary ones with [`MetadataValue::from_bytes`]. Cheap to clone (shared bytes).
///
/// ```
/// use rpc_core::metadata::{MetadataMap, MetadataValue};
/// let mut md = MetadataMap::new();
/// md.insert("x-request-id", "42".parse().unwrap());
/// md.insert("authorization", MetadataValue::from_static("Bearer 3q2+7w=="));
/// md.insert_bin("trace-bin", MetadataValue::from_bytes(&[0xab, 0xcd]));
/// assert_eq!(md.get("x-request-id").unwrap().to_str().unwrap(), "42");
/// assert_eq!(md.get_bin("trace-bin").unwrap().to_bytes().unwrap().as_ref(), &[0xab, 0xcd]);
/// assert!(MetadataValue::try_from("a\nb").is_err());
/// ```
pub struct MetadataValue<VE: ValueEncoding> {
    repr: Repr,
    kind: PhantomData<VE>,
}

/// Bytes of a value kept in the value itself, without an allocation: a request id, a
/// number, a short token.
const INLINE: usize = 30;

/// Where a value's bytes are.
#[derive(Clone)]
enum Repr {
    /// Shared, static, or a slice of a received block.
    Shared(Bytes),
    /// Up to [`INLINE`] bytes: the length, then the bytes.
    Inline(u8, [u8; INLINE]),
}

// By hand: derived, they would ask the kind (an uninhabited marker) for the same traits.
impl<VE: ValueEncoding> Clone for MetadataValue<VE> {
    fn clone(&self) -> Self {
        MetadataValue {
            repr: self.repr.clone(),
            kind: PhantomData,
        }
    }
}

impl<VE: ValueEncoding> PartialEq for MetadataValue<VE> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl<VE: ValueEncoding> Eq for MetadataValue<VE> {}

impl<VE: ValueEncoding> std::hash::Hash for MetadataValue<VE> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl<VE: ValueEncoding> MetadataValue<VE> {
    /// Bytes already checked for the kind.
    pub(crate) fn from_checked(bytes: Bytes) -> Self {
        MetadataValue {
            repr: Repr::Shared(bytes),
            kind: PhantomData,
        }
    }

    /// A copy of bytes already checked for the kind: kept inline when short.
    pub(super) fn copied(bytes: &[u8]) -> Self {
        let repr = if bytes.len() <= INLINE {
            let mut inline = [0; INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Repr::Inline(bytes.len() as u8, inline)
        } else {
            Repr::Shared(Bytes::copy_from_slice(bytes))
        };
        MetadataValue {
            repr,
            kind: PhantomData,
        }
    }

    /// The value's bytes (an ASCII value's text, a binary value's bytes).
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Shared(bytes) => bytes,
            Repr::Inline(len, bytes) => &bytes[..usize::from(*len)],
        }
    }

    /// The length of the value in bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}

impl MetadataValue<Ascii> {
    /// The value of a text known when the program is written.
    ///
    /// # Panics
    ///
    /// If `text` holds a character outside printable ASCII (as tonic's does).
    pub fn from_static(text: &'static str) -> Self {
        assert!(
            wire::printable(text.as_bytes()),
            "MetadataValue::from_static: {text:?} is not printable ASCII (0x20 to 0x7E)"
        );
        Self::from_checked(Bytes::from_static(text.as_bytes()))
    }

    /// The value as text (never fails: an ASCII value is printable ASCII; the `Result` is
    /// tonic's signature).
    ///
    /// # Errors
    ///
    /// None.
    pub fn to_str(&self) -> Result<&str, Error> {
        std::str::from_utf8(self.bytes())
            .map_err(|_| Error::InvalidMetadata("an ASCII value that is not text".into()))
    }

    /// The value's bytes, as they cross the wire.
    pub fn as_encoded_bytes(&self) -> &[u8] {
        self.bytes()
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes()
    }

    fn try_from_bytes(bytes: Cow<'_, [u8]>) -> Result<Self, Error> {
        if !wire::printable(&bytes) {
            return Err(Error::InvalidMetadata(format!(
                "{:?}: ASCII values are printable characters (0x20 to 0x7E)",
                String::from_utf8_lossy(&bytes)
            )));
        }
        Ok(match bytes {
            Cow::Borrowed(b) => Self::copied(b),
            Cow::Owned(v) => Self::from_checked(Bytes::from(v)),
        })
    }
}

impl MetadataValue<Binary> {
    /// The binary value of `bytes` (copied).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Self::copied(bytes)
    }

    /// The value's bytes (never fails here: binary values are kept decoded; the `Result` is
    /// tonic's signature).
    ///
    /// # Errors
    ///
    /// None.
    pub fn to_bytes(&self) -> Result<Bytes, Error> {
        Ok(match &self.repr {
            Repr::Shared(bytes) => bytes.clone(),
            Repr::Inline(..) => Bytes::copy_from_slice(self.bytes()),
        })
    }
}

impl<VE: ValueEncoding> AsRef<[u8]> for MetadataValue<VE> {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl<VE: ValueEncoding> From<MetadataValue<VE>> for Bytes {
    fn from(value: MetadataValue<VE>) -> Bytes {
        match value.repr {
            Repr::Shared(bytes) => bytes,
            Repr::Inline(..) => Bytes::copy_from_slice(value.bytes()),
        }
    }
}

impl<const N: usize> TryFrom<&[u8; N]> for MetadataValue<Ascii> {
    type Error = Error;

    fn try_from(bytes: &[u8; N]) -> Result<Self, Error> {
        Self::try_from_bytes(Cow::Borrowed(&bytes[..]))
    }
}

impl From<Bytes> for MetadataValue<Binary> {
    fn from(bytes: Bytes) -> Self {
        Self::from_checked(bytes)
    }
}

impl From<Vec<u8>> for MetadataValue<Binary> {
    fn from(bytes: Vec<u8>) -> Self {
        Self::from_checked(Bytes::from(bytes))
    }
}

impl FromStr for MetadataValue<Ascii> {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        Self::try_from_bytes(Cow::Borrowed(text.as_bytes()))
    }
}

impl TryFrom<&str> for MetadataValue<Ascii> {
    type Error = Error;

    fn try_from(text: &str) -> Result<Self, Error> {
        text.parse()
    }
}

impl TryFrom<&String> for MetadataValue<Ascii> {
    type Error = Error;

    fn try_from(text: &String) -> Result<Self, Error> {
        text.parse()
    }
}

impl TryFrom<String> for MetadataValue<Ascii> {
    type Error = Error;

    fn try_from(text: String) -> Result<Self, Error> {
        Self::try_from_bytes(Cow::Owned(text.into_bytes()))
    }
}

impl TryFrom<&[u8]> for MetadataValue<Ascii> {
    type Error = Error;

    fn try_from(bytes: &[u8]) -> Result<Self, Error> {
        Self::try_from_bytes(Cow::Borrowed(bytes))
    }
}

macro_rules! from_integers {
    ($($int:ty),*) => {$(
        impl From<$int> for MetadataValue<Ascii> {
            /// The number in decimal.
            fn from(n: $int) -> Self {
                Self::copied(n.to_string().as_bytes())
            }
        }
    )*};
}
from_integers!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

impl fmt::Debug for MetadataValue<Ascii> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&String::from_utf8_lossy(self.bytes()), f)
    }
}

impl fmt::Debug for MetadataValue<Binary> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&Bytes::copy_from_slice(self.bytes()), f)
    }
}

impl<VE: ValueEncoding> PartialEq<&MetadataValue<VE>> for MetadataValue<VE> {
    fn eq(&self, other: &&MetadataValue<VE>) -> bool {
        self == *other
    }
}

impl<VE: ValueEncoding> PartialEq<MetadataValue<VE>> for &MetadataValue<VE> {
    fn eq(&self, other: &MetadataValue<VE>) -> bool {
        *self == other
    }
}

impl PartialEq<str> for MetadataValue<Ascii> {
    fn eq(&self, other: &str) -> bool {
        self.bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for MetadataValue<Ascii> {
    fn eq(&self, other: &&str) -> bool {
        self.bytes() == other.as_bytes()
    }
}

impl PartialEq<String> for MetadataValue<Ascii> {
    fn eq(&self, other: &String) -> bool {
        self.bytes() == other.as_bytes()
    }
}

impl PartialEq<MetadataValue<Ascii>> for str {
    fn eq(&self, other: &MetadataValue<Ascii>) -> bool {
        other == self
    }
}

impl PartialEq<MetadataValue<Ascii>> for &str {
    fn eq(&self, other: &MetadataValue<Ascii>) -> bool {
        other == *self
    }
}

impl<VE: ValueEncoding> PartialEq<[u8]> for MetadataValue<VE> {
    fn eq(&self, other: &[u8]) -> bool {
        self.bytes() == other
    }
}

/// The name of metadata entries of one kind: `MetadataKey::from_static("x-request-id")`,
/// `MetadataKey::from_bytes(name)?`, `name.parse()?`.
pub struct MetadataKey<VE: ValueEncoding> {
    name: Cow<'static, str>,
    kind: PhantomData<VE>,
}

impl<VE: ValueEncoding> Clone for MetadataKey<VE> {
    fn clone(&self) -> Self {
        MetadataKey {
            name: self.name.clone(),
            kind: PhantomData,
        }
    }
}

impl<VE: ValueEncoding> PartialEq for MetadataKey<VE> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<VE: ValueEncoding> Eq for MetadataKey<VE> {}

impl<VE: ValueEncoding> std::hash::Hash for MetadataKey<VE> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl<VE: ValueEncoding> MetadataKey<VE> {
    /// The key of a name known when the program is written, in lower case.
    ///
    /// # Panics
    ///
    /// If [`MetadataKey::from_bytes`] would refuse `name`, or it is not lower case (as
    /// tonic's does).
    pub fn from_static(name: &'static str) -> Self {
        if let Err(err) = check_key::<VE>(name.as_bytes()) {
            panic!("MetadataKey::from_static: {err}");
        }
        assert!(
            wire::name_kind(name.as_bytes()) == NameKind::Lower,
            "MetadataKey::from_static: {name:?} is not lower case"
        );
        MetadataKey {
            name: Cow::Borrowed(name),
            kind: PhantomData,
        }
    }

    /// The key of `name`, lower-cased.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidMetadata`]: a name that is not 1 to 255 characters of `0-9 a-z - _ .`
    /// (in any case), one starting with `grpc-` (reserved for the protocol), or one whose
    /// `-bin` ending does not match the kind.
    pub fn from_bytes(name: &[u8]) -> Result<Self, Error> {
        check_key::<VE>(name)?;
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        Ok(MetadataKey {
            name: Cow::Owned(lower),
            kind: PhantomData,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl<VE: ValueEncoding> FromStr for MetadataKey<VE> {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self, Error> {
        MetadataKey::from_bytes(name.as_bytes())
    }
}

impl<VE: ValueEncoding> fmt::Debug for MetadataKey<VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.name, f)
    }
}

impl<VE: ValueEncoding> fmt::Display for MetadataKey<VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Whether `name` may name entries of kind `VE` (any case).
fn check_key<VE: ValueEncoding>(name: &[u8]) -> Result<(), Error> {
    check_name(name, VE::BINARY)
}

/// Whether `name` may name binary entries (`binary`) or ASCII ones, in any case; if not, why.
pub(super) fn check_name(name: &[u8], binary: bool) -> Result<(), Error> {
    let shown = || String::from_utf8_lossy(name).to_ascii_lowercase();
    let bad = |why: &str| Err(Error::InvalidMetadata(format!("`{}`: {why}", shown())));
    if !(1..=255).contains(&name.len()) || !name.iter().all(|&b| wire::name_byte_any_case(b)) {
        return bad("names are 1 to 255 characters of 0-9 a-z - _ .");
    }
    if name.len() >= 5 && name[..5].eq_ignore_ascii_case(b"grpc-") {
        return bad("names starting with `grpc-` are reserved");
    }
    let ends_bin = name.len() >= 4 && name[name.len() - 4..].eq_ignore_ascii_case(b"-bin");
    if binary != ends_bin {
        return bad(if binary {
            "binary values need a name ending in `-bin`"
        } else {
            "names ending in `-bin` take binary values (insert_bin)"
        });
    }
    Ok(())
}

/// What [`MetadataMap`](super::MetadataMap)'s `insert` and `append` take as a name: a
/// [`MetadataKey`], or a `&'static str` (checked as by [`MetadataKey::from_static`], but in any
/// case).
pub trait IntoMetadataKey<VE: ValueEncoding>: sealed::Sealed {
    /// The key.
    ///
    /// # Panics
    ///
    /// A `&'static str` that [`MetadataKey::from_bytes`] would refuse.
    fn into_metadata_key(self) -> MetadataKey<VE>;
}

impl sealed::Sealed for &str {}
impl<VE: ValueEncoding> sealed::Sealed for MetadataKey<VE> {}
impl<VE: ValueEncoding> sealed::Sealed for &MetadataKey<VE> {}
impl sealed::Sealed for String {}
impl sealed::Sealed for &String {}

impl<VE: ValueEncoding> IntoMetadataKey<VE> for &'static str {
    // Inlined where the map is called: a literal name's checks then fold away when compiled.
    #[inline(always)]
    fn into_metadata_key(self) -> MetadataKey<VE> {
        // One pass over the bytes; the reserved prefix and the kind's suffix are then looked
        // at in the lower-cased name.
        let name = match wire::name_kind(self.as_bytes()) {
            NameKind::Lower => Cow::Borrowed(self),
            NameKind::Mixed => Cow::Owned(self.to_ascii_lowercase()),
            NameKind::Invalid => refuse_key::<VE>(self),
        };
        if name.starts_with("grpc-") || name.ends_with("-bin") != VE::BINARY {
            refuse_key::<VE>(self);
        }
        MetadataKey {
            name,
            kind: PhantomData,
        }
    }
}

/// Panics with why `name` is no key of kind `VE`, as tonic's `insert` does for a bad
/// `&'static str`.
#[cold]
#[inline(never)]
fn refuse_key<VE: ValueEncoding>(name: &str) -> ! {
    match check_key::<VE>(name.as_bytes()) {
        Err(err) => panic!("invalid metadata name: {err}"),
        Ok(()) => panic!("invalid metadata name: `{name}`"),
    }
}

impl<VE: ValueEncoding> IntoMetadataKey<VE> for MetadataKey<VE> {
    fn into_metadata_key(self) -> MetadataKey<VE> {
        self
    }
}

impl<VE: ValueEncoding> IntoMetadataKey<VE> for &MetadataKey<VE> {
    fn into_metadata_key(self) -> MetadataKey<VE> {
        self.clone()
    }
}

/// What [`MetadataMap`](super::MetadataMap)'s lookups take as a name: a `&str`, a `String`
/// or a [`MetadataKey`]. A name that cannot be valid finds nothing.
pub trait AsMetadataKey<VE: ValueEncoding>: sealed::Sealed {
    /// The name looked for.
    fn as_metadata_name(&self) -> &str;
}

impl<VE: ValueEncoding> AsMetadataKey<VE> for &str {
    fn as_metadata_name(&self) -> &str {
        self
    }
}

impl<VE: ValueEncoding> AsMetadataKey<VE> for String {
    fn as_metadata_name(&self) -> &str {
        self
    }
}

impl<VE: ValueEncoding> AsMetadataKey<VE> for &String {
    fn as_metadata_name(&self) -> &str {
        self
    }
}

impl<VE: ValueEncoding> AsMetadataKey<VE> for MetadataKey<VE> {
    fn as_metadata_name(&self) -> &str {
        &self.name
    }
}

impl<VE: ValueEncoding> AsMetadataKey<VE> for &MetadataKey<VE> {
    fn as_metadata_name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_for_their_kind() {
        let id: MetadataValue<Ascii> = "42".parse().unwrap();
        assert_eq!(id, "42");
        assert_eq!(id.to_str().unwrap(), "42");
        assert_eq!(MetadataValue::<Ascii>::from(42u64), id);
        assert!("a\nb".parse::<MetadataValue<Ascii>>().is_err());
        assert!(MetadataValue::<Ascii>::try_from(&[0xffu8][..]).is_err());
        let blob = MetadataValue::<Binary>::from_bytes(&[0, 0xff]);
        assert_eq!(blob.to_bytes().unwrap().as_ref(), &[0, 0xff]);
        assert_eq!(format!("{id:?}"), "\"42\"");
    }

    #[test]
    #[should_panic(expected = "not printable ASCII")]
    fn a_static_value_outside_ascii_panics() {
        let _ = MetadataValue::from_static("tab\there");
    }

    #[test]
    fn keys_are_checked_for_their_kind() {
        assert_eq!(
            "X-Request-Id".parse::<AsciiMetadataKey>().unwrap().as_str(),
            "x-request-id"
        );
        assert!("trace-bin".parse::<AsciiMetadataKey>().is_err());
        assert!("trace".parse::<BinaryMetadataKey>().is_err());
        assert!("grpc-status".parse::<AsciiMetadataKey>().is_err());
        assert!("a b".parse::<AsciiMetadataKey>().is_err());
        assert!("".parse::<AsciiMetadataKey>().is_err());
        let key: AsciiMetadataKey = IntoMetadataKey::into_metadata_key("X-Mixed");
        assert_eq!(key.as_str(), "x-mixed");
    }

    #[test]
    #[should_panic(expected = "reserved")]
    fn a_reserved_static_name_panics() {
        let _: AsciiMetadataKey = IntoMetadataKey::into_metadata_key("grpc-status");
    }
}

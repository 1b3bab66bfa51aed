//! Standard gRPC over HTTP/2 ("gRPC over HTTP2", the protocol every stock gRPC client and
//! server speaks): the face that serves a [`Server`](crate::Server)'s services to stock
//! clients, and the client transport ([`TransportKind::Grpc`](crate::TransportKind)) that
//! calls stock servers. HTTP/2 itself is hyper's; this module maps gRPC onto it: the
//! length-prefixed messages, metadata (`-bin` values in base64), the status in trailers
//! (`grpc-status`, percent-encoded `grpc-message`, `grpc-status-details-bin`) and
//! `grpc-timeout`.

pub(crate) mod call;
pub(crate) mod client;
pub(crate) mod server;
pub(crate) mod tls;

use std::time::Duration;

use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

pub(crate) use call::GrpcCall;

use crate::runtime::call::Encode;
use crate::{Code, MetadataMap, Status};

/// The content type of gRPC requests and responses (`application/grpc+proto` too).
pub(crate) const CONTENT_TYPE: &str = "application/grpc";

/// Bytes of the prefix of each message: a compressed flag and a big-endian length.
const PREFIX_LEN: usize = 5;

/// Headers that are gRPC's or HTTP's own, never metadata.
fn is_protocol_header(name: &str) -> bool {
    name.starts_with("grpc-")
        || matches!(
            name,
            "content-type"
                | "te"
                | "content-length"
                | "connection"
                | "keep-alive"
                | "transfer-encoding"
                | "upgrade"
                | "host"
        )
}

/// One message with its prefix (uncompressed).
pub(crate) fn frame_message(message: &dyn Encode) -> Bytes {
    let len = message.encoded_len();
    let mut buf = vec![0; PREFIX_LEN + len];
    // Byte 0 stays 0: not compressed.
    buf[1..PREFIX_LEN].copy_from_slice(&(len as u32).to_be_bytes());
    message.encode_into(&mut buf[PREFIX_LEN..]);
    Bytes::from(buf)
}

/// Cuts the messages out of a stream of DATA frames.
pub(crate) struct Deframer {
    buf: BytesMut,
    max_message_size: usize,
}

impl Deframer {
    pub(crate) fn new(max_message_size: usize) -> Self {
        Deframer {
            buf: BytesMut::new(),
            max_message_size,
        }
    }

    pub(crate) fn push(&mut self, data: Bytes) {
        self.buf.extend_from_slice(&data);
    }

    /// The next complete message; an error for a compressed one (no `grpc-encoding` was
    /// accepted) or one larger than the limit (refused before it is buffered).
    pub(crate) fn next_message(&mut self) -> Result<Option<Bytes>, Status> {
        if self.buf.len() < PREFIX_LEN {
            return Ok(None);
        }
        let compressed = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if compressed != 0 {
            return Err(Status::internal(
                "a compressed message arrived, but no grpc-encoding was negotiated",
            ));
        }
        if len > self.max_message_size {
            return Err(Status::resource_exhausted(format!(
                "a message of {len} bytes exceeds the limit of {} bytes",
                self.max_message_size
            )));
        }
        if self.buf.len() < PREFIX_LEN + len {
            self.buf.reserve(PREFIX_LEN + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(PREFIX_LEN);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Whether a message was cut short (bytes left over at the end of the stream).
    pub(crate) fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// Base64 as gRPC peers send it: padded or not.
const BASE64_ANY_PADDING: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The custom metadata of HTTP/2 headers or trailers (`-bin` values decoded from base64).
pub(crate) fn metadata_from_headers(headers: &HeaderMap) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    for (name, value) in headers {
        let name = name.as_str();
        if is_protocol_header(name) {
            continue;
        }
        if name.ends_with("-bin") {
            // Values may be padded or not, and a comma-joined list of several.
            for part in value.as_bytes().split(|&b| b == b',') {
                match BASE64_ANY_PADDING.decode(part.trim_ascii()) {
                    Ok(bytes) => {
                        metadata.append_raw(name, &bytes);
                    }
                    Err(e) => {
                        tracing::debug!(name, error = %e, "skipped undecodable binary metadata")
                    }
                }
            }
        } else if !metadata.append_raw(name, value.as_bytes()) {
            tracing::debug!(name, "skipped metadata that is not printable ASCII");
        }
    }
    metadata
}

/// Adds `metadata` to HTTP/2 headers (`-bin` values in unpadded base64).
pub(crate) fn metadata_to_headers(metadata: &MetadataMap, headers: &mut HeaderMap) {
    for (name, value) in metadata.iter() {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        let value = if name.as_str().ends_with("-bin") {
            HeaderValue::from_str(&BASE64_ANY_PADDING.encode(value))
        } else {
            HeaderValue::from_bytes(value)
        };
        if let Ok(value) = value {
            headers.append(name, value);
        }
    }
}

/// What `grpc-message` percent-encodes: controls, `%` and every non-ASCII byte.
const MESSAGE_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// The trailers (or trailers-only headers) that carry `status`: its code, message, details
/// and metadata.
pub(crate) fn status_to_headers(status: &Status, headers: &mut HeaderMap) {
    headers.insert("grpc-status", HeaderValue::from(status.code() as u32));
    if !status.message().is_empty() {
        let encoded =
            percent_encoding::utf8_percent_encode(status.message(), MESSAGE_ESCAPES).to_string();
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            headers.insert("grpc-message", value);
        }
    }
    if !status.details().is_empty() {
        let encoded = BASE64_ANY_PADDING.encode(status.details());
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            headers.insert("grpc-status-details-bin", value);
        }
    }
    metadata_to_headers(status.metadata(), headers);
}

/// The status of trailers (or of trailers-only headers), `None` without `grpc-status`.
pub(crate) fn status_from_headers(headers: &HeaderMap) -> Option<Status> {
    let code = headers.get("grpc-status")?;
    let code = match code.to_str().ok().and_then(|c| c.parse::<u32>().ok()) {
        Some(code) => Code::from_u32(code),
        None => {
            return Some(Status::internal(format!(
                "the server sent a malformed grpc-status: {code:?}"
            )))
        }
    };
    let message = headers
        .get("grpc-message")
        .map(|m| {
            percent_encoding::percent_decode(m.as_bytes())
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let details = headers
        .get("grpc-status-details-bin")
        .and_then(|details| BASE64_ANY_PADDING.decode(details.as_bytes()).ok())
        .unwrap_or_default();
    let metadata = metadata_from_headers(headers);
    Some(Status::with_details_and_metadata(
        code, message, details, metadata,
    ))
}

/// The code of a response whose HTTP status is not 200 (gRPC's "HTTP to gRPC status code
/// mapping").
pub(crate) fn code_of_http_status(status: http::StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// Parses `grpc-timeout`: at most 8 digits and a unit (`H M S m u n`).
pub(crate) fn parse_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Formats `timeout` for `grpc-timeout`: the finest unit whose amount fits 8 digits
/// (rounded up, so the server never sees a shorter deadline than the client's).
pub(crate) fn format_timeout(timeout: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let nanos = timeout.as_nanos().max(1);
    for (unit, per) in [
        ("n", 1u128),
        ("u", 1_000),
        ("m", 1_000_000),
        ("S", 1_000_000_000),
        ("M", 60_000_000_000),
        ("H", 3_600_000_000_000),
    ] {
        let amount = nanos.div_ceil(per);
        if amount <= MAX {
            return format!("{amount}{unit}");
        }
    }
    format!("{MAX}H")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MetadataValue;

    #[test]
    fn timeouts_round_trip_without_shortening() {
        for (text, duration) in [
            ("1n", Duration::from_nanos(1)),
            ("250m", Duration::from_millis(250)),
            ("3S", Duration::from_secs(3)),
            ("2H", Duration::from_secs(7200)),
        ] {
            assert_eq!(parse_timeout(text), Some(duration), "{text}");
        }
        for bad in ["", "5", "m", "123456789m", "1.5S", "10x", "-1S"] {
            assert_eq!(parse_timeout(bad), None, "{bad}");
        }
        for d in [
            Duration::from_nanos(7),
            Duration::from_millis(1500),
            Duration::from_secs(86_400 * 400),
            Duration::new(12, 345_678_901),
        ] {
            let back = parse_timeout(&format_timeout(d)).unwrap();
            assert!(back >= d, "{d:?} came back as {back:?}");
        }
    }

    #[test]
    fn status_survives_headers() {
        let mut md = MetadataMap::new();
        md.insert_bin("trace-bin", MetadataValue::from_bytes(&[0, 0xab, 0xff]));
        md.insert("x-id", MetadataValue::from_static("7"));
        let status = Status::with_details_and_metadata(
            Code::Unknown,
            "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n",
            vec![1, 2, 3],
            md.clone(),
        );
        let mut headers = HeaderMap::new();
        status_to_headers(&status, &mut headers);
        assert!(headers["grpc-message"].to_str().is_ok());
        let back = status_from_headers(&headers).unwrap();
        assert_eq!(back.code(), Code::Unknown);
        assert_eq!(back.message(), status.message());
        assert_eq!(back.details(), &[1, 2, 3]);
        assert_eq!(back.metadata(), &md);
    }

    #[test]
    fn deframer_cuts_messages_across_frames_and_refuses_bad_ones() {
        let one = frame_message(&"hello".to_string());
        let two = frame_message(&String::new());
        let mut all = BytesMut::new();
        all.extend_from_slice(&one);
        all.extend_from_slice(&two);
        let all = all.freeze();
        let mut d = Deframer::new(100);
        d.push(all.slice(..3));
        assert_eq!(d.next_message().unwrap(), None);
        d.push(all.slice(3..));
        assert_eq!(d.next_message().unwrap().unwrap().len(), 7);
        assert_eq!(d.next_message().unwrap().unwrap().len(), 0);
        assert_eq!(d.next_message().unwrap(), None);
        assert!(!d.has_partial());

        let mut d = Deframer::new(4);
        d.push(one.clone());
        assert_eq!(
            d.next_message().unwrap_err().code(),
            Code::ResourceExhausted
        );
        let mut d = Deframer::new(100);
        d.push(Bytes::from_static(&[1, 0, 0, 0, 0]));
        assert_eq!(d.next_message().unwrap_err().code(), Code::Internal);
    }
}

//! One trace per operation: its id, and the headers that carry a span's
//! context from one stage to the next.
//!
//! - [`TraceId::of`]: an operation's trace id is its id's 128 bits, so every
//!   stage, the sweep and a person's decision join the same trace without
//!   being told, and the view and the logs can name it.
//! - [`TraceParent`]: the W3C `traceparent` header a message carries (the
//!   sending span), parsed rather than trusted.
//! - [`TraceParent::xray_header`]: the same context as X-Ray's
//!   `AWSTraceHeader`, which SQS carries as a system attribute so that
//!   X-Ray joins the Lambdas.

use crate::domain::OperationId;

/// A W3C trace id: 16 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 16]);

/// A W3C span id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId([u8; 8]);

impl TraceId {
    /// The operation's trace: the 32 hex digits of its id (a SHA-256 of
    /// its tenant and key, so never all zero in practice; an all-zero id
    /// gets a 1 in its last byte, which W3C requires).
    pub fn of(id: &OperationId) -> Self {
        let hex = id.as_str().trim_start_matches("op_");
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0);
        }
        if bytes == [0; 16] {
            bytes[15] = 1;
        }
        Self(bytes)
    }

    pub fn from_bytes(bytes: [u8; 16]) -> Option<Self> {
        (bytes != [0; 16]).then_some(Self(bytes))
    }

    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }

    /// 32 lowercase hex digits.
    pub fn to_hex(self) -> String {
        hex(&self.0)
    }
}

impl SpanId {
    pub fn from_bytes(bytes: [u8; 8]) -> Option<Self> {
        (bytes != [0; 8]).then_some(Self(bytes))
    }

    pub fn to_bytes(self) -> [u8; 8] {
        self.0
    }

    /// 16 lowercase hex digits.
    pub fn to_hex(self) -> String {
        hex(&self.0)
    }
}

/// The context of the span that sent a message: its trace, itself (the
/// receiver's parent), and whether the trace is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

impl TraceParent {
    /// `00-<trace id>-<span id>-<flags>`.
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id.to_hex(),
            self.span_id.to_hex(),
            u8::from(self.sampled)
        )
    }

    /// A `traceparent` header of version `00` (or a later version, read as
    /// `00` as W3C asks); none when it is malformed or names an all-zero id.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        let version: [u8; 1] = unhex(version)?;
        if version == [0xff] || (version == [0] && parts.next().is_some()) {
            return None;
        }
        let [flags]: [u8; 1] = unhex(flags)?;
        Some(Self {
            trace_id: TraceId::from_bytes(unhex(trace)?)?,
            span_id: SpanId::from_bytes(unhex(span)?)?,
            sampled: flags & 1 == 1,
        })
    }

    /// The same context as X-Ray writes it (`AWSTraceHeader`):
    /// `Root=1-<first 8 hex>-<last 24 hex>;Parent=<span>;Sampled=<0|1>`.
    pub fn xray_header(&self) -> String {
        let trace = self.trace_id.to_hex();
        format!(
            "Root=1-{}-{};Parent={};Sampled={}",
            &trace[..8],
            &trace[8..],
            self.span_id.to_hex(),
            u8::from(self.sampled)
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operations_trace_is_its_id() {
        let id = OperationId::parse("op_0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(TraceId::of(&id).to_hex(), "0123456789abcdef0123456789abcdef");
        let zero = OperationId::parse(&format!("op_{}", "0".repeat(32))).unwrap();
        assert_eq!(TraceId::of(&zero).to_hex(), format!("{}1", "0".repeat(31)));
    }

    #[test]
    fn a_traceparent_round_trips_and_bad_ones_are_refused() {
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let parent = TraceParent::parse(header).unwrap();
        assert!(parent.sampled);
        assert_eq!(parent.header(), header);
        assert_eq!(
            parent.xray_header(),
            "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1"
        );
        let unsampled = TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00").unwrap();
        assert!(!unsampled.sampled);
        // A later version with more fields is read as 00.
        assert!(TraceParent::parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra").is_some());
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-+1",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0A",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }
}

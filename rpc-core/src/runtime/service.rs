//! What describes a service and its methods: [`MethodKind`], [`MethodDescriptor`],
//! [`ServiceDescriptor`], and [`method_id`], the 32-bit id a call's opening frame carries.

/// The four RPC shapes of protobuf services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    /// One request, one response.
    Unary,
    /// A stream of requests, one response.
    ClientStreaming,
    /// One request, a stream of responses.
    ServerStreaming,
    /// Streams both ways.
    BidiStreaming,
}

impl MethodKind {
    /// Whether the method's requests are a stream (its handler starts as the call opens);
    /// otherwise it takes exactly one request message.
    pub(crate) fn receives_stream(self) -> bool {
        matches!(
            self,
            MethodKind::ClientStreaming | MethodKind::BidiStreaming
        )
    }
}

/// Static description of one RPC method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodDescriptor {
    /// Fully qualified service name (`calc.Calculator`).
    pub service: &'static str,
    /// Method name as written in the `.proto` (`Add`).
    pub name: &'static str,
    /// gRPC path (`/calc.Calculator/Add`).
    pub path: &'static str,
    /// Wire id: `method_id(path)`.
    pub id: u32,
    /// Unary or streaming.
    pub kind: MethodKind,
}

impl MethodDescriptor {
    /// A descriptor whose id is computed from its path.
    pub const fn new(
        service: &'static str,
        name: &'static str,
        path: &'static str,
        kind: MethodKind,
    ) -> MethodDescriptor {
        MethodDescriptor {
            service,
            name,
            path,
            id: method_id(path),
            kind,
        }
    }
}

/// Static description of a service: its name and methods, in `.proto` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceDescriptor {
    /// Fully qualified service name (`calc.Calculator`).
    pub name: &'static str,
    /// The methods, in declaration order; `Service::call` takes an index into this.
    pub methods: &'static [MethodDescriptor],
}

/// A method as a server serves it: its wire id, its kind, and the index of its route. A
/// connection looks a method up by id once and keeps it for the calls that follow, which
/// then reach their handler by index: no hashing per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServedMethod {
    /// The wire id ([`method_id`] of its path).
    pub(crate) id: u32,
    pub(crate) kind: MethodKind,
    /// Where the server's dispatch (`port::Dispatch`) that handed it out keeps its route.
    pub(crate) route: u32,
}

/// The wire id of a method: 32-bit FNV-1a over the bytes of its gRPC path
/// (`/package.Service/Method`). `docs/PROTOCOL.md` specifies it for third-party peers.
pub const fn method_id(path: &str) -> u32 {
    let bytes = path.as_bytes();
    let mut hash: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u32;
        hash = hash.wrapping_mul(0x0100_0193);
        i += 1;
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_id_is_fnv1a_of_the_path() {
        // FNV-1a 32 reference values: "" and "a".
        assert_eq!(method_id(""), 0x811c_9dc5);
        assert_eq!(method_id("a"), 0xe40c_292c);
        assert_ne!(
            method_id("/calc.Calculator/Add"),
            method_id("/calc.Calculator/Subtract")
        );
        const ADD: MethodDescriptor = MethodDescriptor::new(
            "calc.Calculator",
            "Add",
            "/calc.Calculator/Add",
            MethodKind::Unary,
        );
        assert_eq!(ADD.id, method_id("/calc.Calculator/Add"));
    }
}

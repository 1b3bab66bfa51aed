//! [`VerbsLink`], the runtime's handle on a verbs link: the transport's [`Link`] over a
//! [`LinkInner`]. Kept out of `link.rs` because it unwraps and builds transport/mod.rs's
//! `SendBuf`, and mod.rs names `link.rs`'s buffer types: both in one file would be an import
//! cycle.

use std::sync::{Arc, Weak};

use super::link::{LinkInner, VerbsSend};
use super::qp::QpAttributes;
use crate::protocol::v2::Hello;
use crate::transport::{CreditsDue, Link, LinkId, SendBuf, SendInner};
use crate::Error;

/// The [`Link`] of the verbs transport.
pub struct VerbsLink {
    inner: Arc<LinkInner>,
}

impl VerbsLink {
    /// The send slot of `buf`, once it is known to be this link's and `len` to fit it.
    fn checked(&self, buf: SendBuf, len: usize) -> Result<VerbsSend, Error> {
        let send = match buf.inner {
            SendInner::Verbs(send) => send,
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::Verbs {
                    call: "ibv_post_send",
                    reason: "the buffer was not allocated by a verbs link".into(),
                })
            }
        };
        let link = &self.inner;
        if !send.belongs_to(link) {
            return Err(Error::Verbs {
                call: "ibv_post_send",
                reason: "the buffer belongs to another link".into(),
            });
        }
        let limit = link.send_limit();
        if len > limit {
            return Err(Error::FrameTooLarge {
                len,
                slot_size: limit,
            });
        }
        if link.is_closing() {
            return Err(Error::ConnectionClosed(link.close_reason()));
        }
        Ok(send)
    }

    pub(super) fn new(inner: Arc<LinkInner>) -> VerbsLink {
        VerbsLink { inner }
    }

    /// The QP's attributes as the device reports them (RNR and retry settings, path MTU,
    /// queue depths, inline limit).
    pub fn qp_attributes(&self) -> Result<QpAttributes, Error> {
        self.inner.qp().attributes()
    }
}

impl Link for VerbsLink {
    fn id(&self) -> LinkId {
        self.inner.id()
    }

    fn alloc_send(&self) -> Option<SendBuf> {
        let send = self.inner.alloc_send()?;
        Some(SendBuf {
            inner: SendInner::Verbs(send),
        })
    }

    fn send_slot_size(&self) -> usize {
        self.inner.send_limit()
    }

    fn ring_bytes(&self) -> usize {
        self.inner.ring_bytes()
    }

    fn post_send(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        rpc_sync::assert_unlocked("posting a frame");
        let send = self.checked(buf, len)?;
        self.inner.post_send(send, len)
    }

    fn post_send_batched(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        rpc_sync::assert_unlocked("posting a frame");
        let send = self.checked(buf, len)?;
        self.inner.post_send_batched(send, len);
        Ok(())
    }

    fn flush_sends(&self) -> Result<(), Error> {
        rpc_sync::assert_unlocked("posting frames");
        self.inner.flush_sends()
    }

    fn take_reposted(&self) -> u32 {
        self.inner.reposts().ledger().take_released()
    }

    fn publish_owed(&self, owed: u32) -> u32 {
        self.inner.reposts().ledger().publish_owed(owed)
    }

    fn on_credits_due(&self, conn: Weak<dyn CreditsDue>, threshold: u32) {
        self.inner.reposts().set_hook(conn, threshold);
    }

    fn local_hello(&self) -> Hello {
        self.inner.local_hello()
    }

    fn peer_hello(&self) -> Hello {
        self.inner.peer_hello()
    }

    fn peer_name(&self) -> String {
        self.inner.peer_name().to_string()
    }

    fn take_grant(&self) -> Option<rpc_proto::Grant> {
        self.inner.take_grant()
    }

    fn close(&self) {
        self.inner.close_with("closed locally".to_string());
    }
}

//! [`Reposts`]: a link's count of re-posted receive slots (its [`CreditLedger`]), and the
//! connection to tell when the credits due reach its threshold. A leaf module: the heap slots
//! and the verbs link count their re-posts here, and transport/mod.rs names the hook.

use std::sync::{OnceLock, Weak};

use rpc_sync::CreditLedger;

/// Told that the credits due on a link (slots re-posted and not taken yet, plus the owed
/// credits last published) reached the threshold it registered: a CREDIT frame may be due.
pub trait CreditsDue: Send + Sync {
    /// Called by the thread that re-posted the slot, with no lock held.
    fn credits_due(&self);
}

/// The connection to tell, and from how many credits due on.
struct Hook {
    conn: Weak<dyn CreditsDue>,
    threshold: u32,
}

/// A link's re-posted receive slots: counted in the credit ledger as each slot goes back, and
/// the connection told when the credits due reach its threshold. The slot's owner (a received
/// body being decoded) needs no handle on the connection: the link has it.
#[derive(Default)]
pub(crate) struct Reposts {
    ledger: CreditLedger,
    hook: OnceLock<Hook>,
}

impl Reposts {
    pub(crate) fn new() -> Reposts {
        Reposts::default()
    }

    /// The ledger, for the connection's owner (taking re-posts, publishing what it owes).
    pub(crate) fn ledger(&self) -> &CreditLedger {
        &self.ledger
    }

    /// Registers the connection to tell (once; later calls are ignored).
    pub(crate) fn set_hook(&self, conn: Weak<dyn CreditsDue>, threshold: u32) {
        let _ = self.hook.set(Hook { conn, threshold });
    }

    /// Counts a slot that is back in the posted pool (it must be before it is counted: the
    /// peer may send into it as soon as it learns of the credit), and tells the connection
    /// if the credits due reach its threshold ([`CreditLedger::release`] answers for this
    /// very re-post, which is what the ledger's protocol relies on).
    #[inline(always)]
    pub(crate) fn release(&self) {
        let due = self.ledger.release();
        if let Some(hook) = self.hook.get() {
            if due >= u64::from(hook.threshold) {
                if let Some(conn) = hook.conn.upgrade() {
                    conn.credits_due();
                }
            }
        }
    }
}

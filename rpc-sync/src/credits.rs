//! [`CreditLedger`]: a connection's receive credits between the threads that re-post its
//! receive slots and the connection's owner, which returns them to the peer.

use std::sync::atomic::Ordering;

use crate::primitive::AtomicU64;

/// The low half: slots re-posted and not taken by the owner yet.
const RELEASED: u64 = u32::MAX as u64;
/// The high half: the credits the owner owes, as it last published them.
const OWED_SHIFT: u32 = 32;

fn released(word: u64) -> u32 {
    (word & RELEASED) as u32
}

fn owed(word: u64) -> u32 {
    (word >> OWED_SHIFT) as u32
}

/// Credits re-posted by any thread and the credits the owner owes the peer, in one atomic
/// word.
///
/// Protocol: a thread that re-posts a receive slot (the slot back in the posted pool first)
/// counts it with [`CreditLedger::release`], which says whether the credits due (re-posted
/// and not taken, plus owed as last published) reach a threshold: then it asks the owner for
/// a step. The owner's step takes the re-posts ([`CreditLedger::take_released`]), sends a
/// CREDIT frame if enough are owed, and publishes what it still owes with
/// [`CreditLedger::publish_owed`], which returns the re-posts counted meanwhile in the same
/// atomic step: if those reach the threshold, the owner takes them and goes on.
///
/// Guarantee: credits that reach the threshold are never left with nobody to send them. A
/// release and the owner's publication are read-modify-writes of one word, so one of the two
/// comes second and sees the other: the releaser sees the published debt, or the owner sees
/// the re-post (the loom model `credits_due_are_never_left_unsent`, which runs this code).
#[derive(Debug, Default)]
pub struct CreditLedger {
    word: AtomicU64,
}

impl CreditLedger {
    /// Nothing re-posted, nothing owed.
    pub fn new() -> CreditLedger {
        CreditLedger::default()
    }

    /// One receive slot was re-posted (it is back in the posted pool). Returns the credits
    /// due now: re-posts not taken plus the owed credits last published, which the caller
    /// compares with its threshold to decide whether to ask the owner for a step.
    #[inline]
    pub fn release(&self) -> u64 {
        let prev = self.word.fetch_add(1, Ordering::AcqRel);
        u64::from(released(prev)) + 1 + u64::from(owed(prev))
    }

    /// The owner takes the re-posts counted so far (they become credits it owes).
    #[inline]
    pub fn take_released(&self) -> u32 {
        released(self.word.fetch_and(!RELEASED, Ordering::AcqRel))
    }

    /// Re-posts counted and not taken yet (a snapshot).
    #[inline]
    pub fn released_pending(&self) -> u32 {
        released(self.word.load(Ordering::Acquire))
    }

    /// The owner publishes the credits it owes; returns the re-posts counted and not taken at
    /// that moment (read in the same atomic step).
    #[inline]
    pub fn publish_owed(&self, owed: u32) -> u32 {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let next = (u64::from(owed) << OWED_SHIFT) | (word & RELEASED);
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return released(word),
                Err(now) => word = now,
            }
        }
    }
}

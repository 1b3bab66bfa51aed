//! A client endpoint's calls as its poller thread needs to know them ([`PollDuty`]): calls
//! started and finished, callers waiting without driving, calls with a deadline.
//!
//! [`PollDuty`]: rpc_sync::PollDuty

use super::Endpoint;

impl Endpoint {
    /// A client call starts (see [`Endpoint::stop_driving`]). A unary call's caller drives
    /// or counts itself among the waiters when it waits; a stream's may not, so the poller
    /// thread comes back. A call with a `deadline` (one the core watches) calls back a poller
    /// thread that sleeps long, so that the deadline is looked at every tick.
    pub(crate) fn call_started(&self, stream: bool, deadline: bool) {
        let back = self.duty.call_started(stream, deadline);
        if back.unpark {
            self.wake_the_poller();
        }
        if back.ring {
            self.cq.wake();
        }
    }

    /// A client call is over for its caller (`stream` and `deadline` as it started).
    pub(crate) fn call_finished(&self, stream: bool, deadline: bool) {
        self.duty.call_finished(stream, deadline);
    }

    /// Somebody waits for a unary call's outcome without driving (a parked caller, a
    /// pending future) until the guard is dropped: the poller thread must not stand back.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.begin_waiting();
        Waiting(self)
    }

    /// [`Endpoint::waiting`] for a waiter that outlives a borrow (a pending future); it
    /// must call [`Endpoint::end_waiting`] once.
    pub(crate) fn begin_waiting(&self) {
        if self.duty.begin_waiting() {
            self.wake_the_poller();
        }
    }

    /// A waiter counted by [`Endpoint::begin_waiting`] stops waiting.
    pub(crate) fn end_waiting(&self) {
        self.duty.end_waiting();
    }
}

/// One waiter counted in [`Endpoint::waiting`], until dropped.
pub(crate) struct Waiting<'a>(&'a Endpoint);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.end_waiting();
    }
}

//! [`PollDuty`]: who polls a client endpoint's completion queue: its poller thread, or one
//! caller that drives the queue itself while it waits for its own call (no thread hand-off
//! on the reply path).

use std::sync::atomic::Ordering;

use crate::primitive::AtomicU64;

/// A caller drives (polls) the completion queue.
const DRIVING: u64 = 1;
/// The poller thread stands back although nobody drives: the last driver is likely to drive
/// again at once (see [`PollDuty::stop_driving`]).
const STANDING_BACK: u64 = 1 << 1;
/// Some caller started driving since the poller thread last looked.
const DROVE: u64 = 1 << 2;
/// Width of each count.
const FIELD_BITS: u32 = 20;
const FIELD_MAX: u64 = (1 << FIELD_BITS) - 1;
/// Calls started and not over for their callers.
const CALLS: u32 = 3;
/// Of those, stream calls.
const STREAMS: u32 = CALLS + FIELD_BITS;
/// Unary calls whose outcome somebody waits for without driving.
const WAITERS: u32 = STREAMS + FIELD_BITS;
const _: () = assert!(WAITERS + FIELD_BITS <= 64);

/// In the word of deadlines (beside their count): the poller thread sleeps on the queue for
/// long, as no call has a deadline; a call with one that starts rings it.
const IDLE: u64 = 1 << 63;

/// Whom a caller must wake for the call it started ([`PollDuty::call_started`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallBack {
    /// The poller thread is parked (it stood back, or a caller drives) and must look again.
    pub unpark: bool,
    /// The poller thread sleeps long on the completion queue ([`PollDuty::idle_wait`]):
    /// ring the queue.
    pub ring: bool,
}

fn field(s: u64, at: u32) -> u64 {
    (s >> at) & FIELD_MAX
}

/// The polling duty of a client endpoint's completion queue, shared by its poller thread and
/// its callers. One atomic word holds who drives, whether the poller thread stands back, and
/// the counts the decisions depend on (calls outstanding, streams open, waiters), so each
/// decision and its effect are one atomic step: no fence, no store-then-load pairing between
/// two variables.
///
/// The rules (the behaviour of the endpoint, which calls these):
/// - A caller may drive when its call is the only one outstanding, or, on a queue that needs
///   polling (verbs), when no stream is open and nobody waits without driving
///   ([`PollDuty::start_driving`]); one caller drives at a time, and the poller thread stands
///   back while it does.
/// - A driver whose call is done lets the poller thread stand back if its call was the only
///   one, or the others are futures nobody waits for (verbs): its next wait drives again
///   ([`PollDuty::stop_driving`]).
/// - Whoever starts to wait without driving, or opens a stream, calls a standing-back poller
///   thread back (`true`: the caller wakes it).
/// - A standing-back poller thread that saw nobody drive during a tick stops standing back
///   ([`PollDuty::tick`]).
/// - A poller thread with no call counted may stand back ([`PollDuty::stand_back_idle`]):
///   an idle client's poller parks between its ticks instead of waking every tick.
/// - A poller thread with no call with a deadline outstanding sleeps on the queue for long
///   ([`PollDuty::idle_wait`]; completions wake it); a call with a deadline that starts
///   meanwhile calls it back, so that its deadline is looked at every tick.
///
/// Guarantee: the poller thread never stands back while somebody waits without driving or a
/// stream is open, once their call is counted: whoever makes the two meet (a waiter or
/// stream arriving, a driver standing the poller back) sees the other in the same word and
/// calls the poller back (the loom model `poll_duty_never_strands_a_waiter`). Two callers
/// never drive at once. A poller thread never sleeps long on the queue while a call with a
/// deadline is counted: it sees the call, or the call sees it asleep and rings (the loom
/// model `poll_duty_wakes_an_idle_poller_for_a_deadline`). A poller thread that stands back
/// is parked until its next tick: a future with a deadline that starts meanwhile and that
/// nobody polls yet has its deadline looked at from then on (whoever waits for it calls the
/// poller back at once).
#[derive(Debug)]
pub struct PollDuty {
    word: AtomicU64,
    /// Calls with a deadline the poller thread's ticks end (futures', streams'), and
    /// [`IDLE`]: one word, so that the poller's decision to sleep long and a call's start
    /// see each other.
    deadlines: AtomicU64,
    /// Completions show up only when polled (verbs).
    needs_polling: bool,
}

impl PollDuty {
    /// Nobody drives, no calls; `needs_polling`: the queue's completions show up only when a
    /// thread polls for them (verbs), so that a caller with other calls outstanding may drive.
    pub fn new(needs_polling: bool) -> PollDuty {
        PollDuty {
            word: AtomicU64::new(0),
            deadlines: AtomicU64::new(0),
            needs_polling,
        }
    }

    /// Whether, in `s`, the poller thread may stand back for a unary caller that drove while
    /// other calls are outstanding.
    fn may_stand_back(&self, s: u64) -> bool {
        self.needs_polling && field(s, STREAMS) == 0 && field(s, WAITERS) == 0
    }

    /// Clears `STANDING_BACK`; `true` if it was set (the poller thread must be woken).
    fn call_back(&self) -> bool {
        self.word.fetch_and(!STANDING_BACK, Ordering::AcqRel) & STANDING_BACK != 0
    }

    /// Applies `f` to the word atomically; returns what `f` decided with the old word. `f`
    /// returning the word unchanged writes nothing.
    fn update<R>(&self, mut f: impl FnMut(u64) -> (u64, R)) -> R {
        let mut s = self.word.load(Ordering::Acquire);
        loop {
            let (next, r) = f(s);
            if next == s {
                return r;
            }
            match self
                .word
                .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return r,
                Err(now) => s = now,
            }
        }
    }

    /// The counts a call adds: a stream's or not.
    fn call_counts(stream: bool) -> u64 {
        (1 << CALLS) | if stream { 1 << STREAMS } else { 0 }
    }

    /// A call starts, a stream or not, with a deadline the poller thread's ticks end or not.
    /// Whom to wake: the poller thread if it stood back when a stream opened (a stream's
    /// reader and sender wait without being counted as waiters); if a call with a deadline
    /// starts while it sleeps long on the queue (ring), or while it is parked for a caller
    /// that drives (it chose its nap for the calls it saw then).
    #[inline]
    pub fn call_started(&self, stream: bool, deadline: bool) -> CallBack {
        let prev = self
            .word
            .fetch_add(Self::call_counts(stream), Ordering::AcqRel);
        assert!(
            field(prev, CALLS) < FIELD_MAX && field(prev, STREAMS) < FIELD_MAX,
            "more than {FIELD_MAX} calls outstanding on one endpoint"
        );
        let mut back = CallBack {
            unpark: stream && prev & STANDING_BACK != 0 && self.call_back(),
            ring: false,
        };
        if deadline {
            let before = self.deadlines.fetch_add(1, Ordering::AcqRel);
            back.ring =
                before & IDLE != 0 && self.deadlines.fetch_and(!IDLE, Ordering::AcqRel) & IDLE != 0;
            back.unpark |= prev & DRIVING != 0;
        }
        back
    }

    /// A call is over for its caller (`stream` and `deadline` as it started).
    #[inline]
    pub fn call_finished(&self, stream: bool, deadline: bool) {
        self.word
            .fetch_sub(Self::call_counts(stream), Ordering::AcqRel);
        if deadline {
            self.deadlines.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The poller thread is about to sleep on the queue: `true` (it may sleep long) if no
    /// call with a deadline is outstanding, and then a call with one that starts rings the
    /// queue ([`CallBack::ring`]); it calls [`PollDuty::end_idle_wait`] when it wakes.
    /// `false`: it sleeps a tick.
    #[inline]
    pub fn idle_wait(&self) -> bool {
        self.deadlines
            .compare_exchange(0, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The poller thread woke from an [`PollDuty::idle_wait`].
    #[inline]
    pub fn end_idle_wait(&self) {
        self.deadlines.fetch_and(!IDLE, Ordering::AcqRel);
    }

    /// Calls with a deadline outstanding (a snapshot).
    #[inline]
    pub fn deadline_calls(&self) -> usize {
        (self.deadlines.load(Ordering::Acquire) & !IDLE) as usize
    }

    /// Calls started and not over for their callers (a snapshot).
    #[inline]
    pub fn calls_outstanding(&self) -> usize {
        field(self.word.load(Ordering::Acquire), CALLS) as usize
    }

    /// Stream calls started and not over (a snapshot).
    #[inline]
    pub fn streams_open(&self) -> usize {
        field(self.word.load(Ordering::Acquire), STREAMS) as usize
    }

    /// Somebody starts waiting for a unary call's outcome without driving. `true`: the
    /// poller thread stood back and must be woken.
    #[inline]
    pub fn begin_waiting(&self) -> bool {
        let prev = self.word.fetch_add(1 << WAITERS, Ordering::AcqRel);
        assert!(
            field(prev, WAITERS) < FIELD_MAX,
            "more than {FIELD_MAX} waiters on one endpoint"
        );
        prev & STANDING_BACK != 0 && self.call_back()
    }

    /// A waiter counted by [`PollDuty::begin_waiting`] stops waiting.
    #[inline]
    pub fn end_waiting(&self) {
        self.word.fetch_sub(1 << WAITERS, Ordering::AcqRel);
    }

    /// A caller asks to drive; granted (`true`) if nobody drives and its call is the only
    /// one, or the poller thread may stand back for it.
    #[inline]
    pub fn start_driving(&self) -> bool {
        self.update(|s| {
            let may = s & DRIVING == 0 && (field(s, CALLS) <= 1 || self.may_stand_back(s));
            if may {
                (s | DRIVING | DROVE, true)
            } else {
                (s, false)
            }
        })
    }

    /// The driver stops. Returns `true` if the poller thread must be woken: the driver's own
    /// call is not done (it goes on to park), or other calls wait for completions. A driver
    /// whose call is done and was the only one, or whose other calls are futures nobody waits
    /// for on a queue that needs polling, leaves the poller thread standing back and wakes
    /// nobody: its next call drives again, and the poller thread stays off the queue (where
    /// the reply would wake it too) until a tick passes without a driver.
    #[inline]
    pub fn stop_driving(&self, own_call_done: bool) -> bool {
        self.update(|s| {
            let s = s & !DRIVING;
            if !own_call_done {
                (s & !STANDING_BACK, true)
            } else if field(s, CALLS) <= 1 {
                (s | DROVE | STANDING_BACK, false)
            } else if !self.may_stand_back(s) {
                (s, true)
            } else {
                (s | DROVE | STANDING_BACK, false)
            }
        })
    }

    /// A stream reader that drove stops: if its message came, the poller thread keeps
    /// standing back (the reader's next wait drives again) unless other calls are
    /// outstanding; otherwise polling goes back to the poller thread. `true`: wake it.
    #[inline]
    pub fn stop_driving_stream(&self, message_came: bool) -> bool {
        self.update(|s| {
            let s = s & !DRIVING;
            if !message_came || field(s, CALLS) > 1 {
                (s & !STANDING_BACK, true)
            } else {
                (s | STANDING_BACK, false)
            }
        })
    }

    /// Whether a caller drives now.
    #[inline]
    pub fn is_driving(&self) -> bool {
        self.word.load(Ordering::Acquire) & DRIVING != 0
    }

    /// Whether the poller thread stands back now.
    #[inline]
    pub fn is_standing_back(&self) -> bool {
        self.word.load(Ordering::Acquire) & STANDING_BACK != 0
    }

    /// The standing-back poller thread's look once per tick: if nobody started driving
    /// since its last look, it stops standing back. Returns whether somebody drove.
    pub fn tick(&self) -> bool {
        self.update(|s| {
            if s & DROVE != 0 {
                (s & !DROVE, true)
            } else {
                (s & !STANDING_BACK, false)
            }
        })
    }

    /// The poller thread of a client with no call outstanding stands back (it parks rather
    /// than wait on a queue that callers sleep on too, where it cannot sleep long). `true`
    /// if it does: nobody drives and no call is counted. A call counted from then on finds
    /// it standing back, as after a driver's call: a waiter or a stream calls it back.
    #[inline]
    pub fn stand_back_idle(&self) -> bool {
        self.update(|s| {
            if s & DRIVING == 0 && field(s, CALLS) == 0 {
                (s | STANDING_BACK, true)
            } else {
                (s, false)
            }
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{CallBack, PollDuty};

    #[test]
    fn a_stream_with_a_deadline_calls_back_a_poller_standing_back_and_sleeping() {
        // The poller went to sleep long; then a caller drove and stood it back.
        let duty = PollDuty::new(false);
        assert!(duty.idle_wait());
        duty.call_started(false, false);
        assert!(duty.start_driving());
        assert!(
            !duty.stop_driving(true),
            "the only call: the poller stands back"
        );
        duty.call_finished(false, false);
        let both = CallBack {
            unpark: true,
            ring: true,
        };
        assert_eq!(duty.call_started(true, true), both);
        assert_eq!(duty.deadline_calls(), 1);
        assert!(!duty.idle_wait(), "a deadline is outstanding");
    }

    #[test]
    fn a_call_with_a_deadline_calls_back_a_poller_parked_for_a_driver() {
        let duty = PollDuty::new(false);
        duty.call_started(false, false);
        assert!(duty.start_driving());
        let back = duty.call_started(false, true);
        assert!(back.unpark && !back.ring, "{back:?}");
        assert_eq!(duty.call_started(false, false), CallBack::default());
    }

    #[test]
    fn an_idle_poller_stands_back_only_with_no_call_and_a_waiter_calls_it_back() {
        let duty = PollDuty::new(true);
        duty.call_started(false, false);
        assert!(!duty.stand_back_idle(), "a call is outstanding");
        duty.call_finished(false, false);
        assert!(duty.stand_back_idle());
        assert!(duty.is_standing_back());
        // A blocking caller drives without waking it; one that waits calls it back.
        duty.call_started(false, false);
        assert!(duty.start_driving());
        assert!(!duty.stand_back_idle(), "a caller drives");
        assert!(!duty.stop_driving(true));
        duty.call_finished(false, false);
        duty.call_started(false, false);
        assert!(
            duty.begin_waiting(),
            "the waiter wakes the poller standing back"
        );
        assert!(!duty.is_standing_back());
        duty.end_waiting();
        duty.call_finished(false, false);
        // A stream opening calls it back too.
        assert!(duty.stand_back_idle());
        assert!(duty.call_started(true, false).unpark);
        assert!(!duty.is_standing_back());
    }
}

//! Loom models of the hand-off primitives. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rpc-sync --release --test loom`
//! (`make loom`; part of `make test`).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use rpc_sync::{
    Completed, DrainQueue, Exclusive, Flusher, Inbox, Oneshot, Pushed, Serializer, Signal,
    WorkQueue,
};

/// Two threads take turns owning the data; loom's cell tracking fails the model if two ever
/// touch it at once.
#[test]
fn exclusive_is_never_owned_twice() {
    loom::model(|| {
        let shared = Arc::new(Exclusive::new(0u32));
        let other = Arc::clone(&shared);
        let t = thread::spawn(move || {
            if let Some(mut g) = other.try_lock() {
                g.with(|v| *v += 1);
            }
        });
        if let Some(mut g) = shared.try_lock() {
            g.with(|v| *v += 1);
        }
        t.join().unwrap();
    });
}

/// The completion queue's drive (`ChannelCq::drive`, the TCP I/O thread and in-memory
/// peers): two producers each queue an item, then drain the queue themselves if they can own
/// the draining (an `Exclusive`, as the endpoint's poll state is), or leave it to the owner.
/// Every item is drained by somebody, whichever thread ends up owning.
#[test]
fn drain_queue_leaves_nothing_behind() {
    fn produce_and_drive(queue: &DrainQueue<u32>, owner: &Exclusive<Vec<u32>>, item: u32) {
        queue.enqueue(item);
        queue.drive(|| {
            let Some(mut g) = owner.try_lock() else {
                return false;
            };
            g.with(|done| queue.drain_into(done, 32));
            true
        });
    }
    loom::model(|| {
        let queue = Arc::new(DrainQueue::with_capacity(2));
        let owner = Arc::new(Exclusive::new(Vec::new()));
        let (q, o) = (Arc::clone(&queue), Arc::clone(&owner));
        let other = thread::spawn(move || produce_and_drive(&q, &o, 1));
        produce_and_drive(&queue, &owner, 2);
        other.join().unwrap();
        assert!(queue.is_empty(), "an item stranded");
        let mut g = owner.try_lock().expect("nobody owns it any more");
        let mut done = g.with(|done| done.clone());
        done.sort_unstable();
        assert_eq!(done, vec![1, 2]);
    });
}

/// The poller thread sleeps on the completion queue while a producer pushes, then while
/// another thread wakes it (a link registered): it never sleeps through the item, and the
/// wake is not lost either (a wait that starts after it returns at once).
#[test]
fn drain_queue_wakes_a_sleeping_consumer() {
    loom::model(|| {
        let queue = Arc::new(DrainQueue::with_capacity(1));
        let producer = Arc::clone(&queue);
        let t = thread::spawn(move || {
            producer.push(7u32);
        });
        let mut got = Vec::new();
        while got.is_empty() {
            queue.wait(None);
            queue.drain_into(&mut got, 8);
        }
        assert_eq!(got, vec![7]);
        t.join().unwrap();
        let waker = Arc::clone(&queue);
        let t = thread::spawn(move || {
            waker.wake();
        });
        queue.wait(None);
        t.join().unwrap();
    });
}

/// A caller waiting for its own reply sleeps on the completion queue beside the poller
/// thread: a push wakes both, whichever the lock favours (with one woken, the other would
/// sleep through the item it waits for).
#[test]
fn drain_queue_wakes_every_sleeping_consumer() {
    loom::model(|| {
        let queue = Arc::new(DrainQueue::with_capacity(1));
        let second = Arc::clone(&queue);
        let sleeper = thread::spawn(move || second.wait(None));
        let producer = Arc::clone(&queue);
        let t = thread::spawn(move || {
            producer.push(7u32);
        });
        queue.wait(None);
        sleeper.join().unwrap();
        t.join().unwrap();
        let mut got = Vec::new();
        queue.drain_into(&mut got, 8);
        assert_eq!(got, vec![7]);
    });
}

/// A TCP link's writer: two posters queue a frame each and flush; the socket takes
/// everything. Every frame is written exactly once, by one writer at a time, and the turn is
/// free at the end.
#[test]
fn flusher_leaves_nothing_behind() {
    fn post(queue: &loom::sync::Mutex<Vec<u32>>, flusher: &Flusher<Vec<u32>>, item: u32) {
        queue.lock().unwrap().push(item);
        let mut turn = flusher.try_flush();
        while let Some(mut t) = turn {
            t.with(|written| written.extend(queue.lock().unwrap().drain(..)));
            turn = t.finish();
        }
    }
    loom::model(|| {
        let queue = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let flusher = Arc::new(Flusher::new(Vec::new()));
        let (q, f) = (Arc::clone(&queue), Arc::clone(&flusher));
        let other = thread::spawn(move || post(&q, &f, 1));
        post(&queue, &flusher, 2);
        other.join().unwrap();
        assert!(queue.lock().unwrap().is_empty(), "a frame left unwritten");
        let mut turn = flusher.try_flush().expect("the turn is free");
        let mut written = turn.with(|w| w.clone());
        written.sort_unstable();
        assert_eq!(written, vec![1, 2]);
    });
}

/// A full socket: a poster writes one frame (the socket's room), then meets the full socket
/// with its second and stalls the writer, asking the I/O thread (once); the I/O thread,
/// resuming on a writable event that races it, writes what is queued. At the end, whatever
/// is still queued is in a stalled flusher's hands (the I/O thread has been asked, or will
/// get the writable event), never with nobody to write it.
#[test]
fn flusher_hands_a_stall_to_the_resumer() {
    struct Sink {
        written: Vec<u32>,
        room: usize,
    }
    /// Writes until the queue is empty (`true`) or the sink is full (`false`).
    fn write(queue: &loom::sync::Mutex<Vec<u32>>, sink: &mut Sink) -> bool {
        let mut queue = queue.lock().unwrap();
        while !queue.is_empty() {
            if sink.room == 0 {
                return false;
            }
            sink.room -= 1;
            sink.written.push(queue.remove(0));
        }
        true
    }
    fn run(
        queue: &loom::sync::Mutex<Vec<u32>>,
        mut turn: Option<rpc_sync::FlushTurn<'_, Sink>>,
        io_thread: bool,
        asks: &AtomicUsize,
    ) {
        while let Some(mut t) = turn {
            if t.with(|sink| write(queue, sink)) {
                turn = t.finish();
            } else {
                if t.stall(!io_thread) {
                    asks.fetch_add(1, Ordering::SeqCst);
                }
                return;
            }
        }
    }
    loom::model(|| {
        let queue = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let flusher = Arc::new(Flusher::new(Sink {
            written: Vec::new(),
            room: 1,
        }));
        let asks = Arc::new(AtomicUsize::new(0));
        let poster = {
            let (q, f, a) = (Arc::clone(&queue), Arc::clone(&flusher), Arc::clone(&asks));
            thread::spawn(move || {
                for item in 1..=2 {
                    q.lock().unwrap().push(item);
                    run(&q, f.try_flush(), false, &a);
                }
            })
        };
        // The I/O thread: a writable event (no request taken).
        run(&queue, flusher.resume(false), true, &asks);
        poster.join().unwrap();
        assert!(
            asks.load(Ordering::SeqCst) <= 1,
            "asked twice for one stall"
        );
        if !queue.lock().unwrap().is_empty() {
            assert!(
                flusher.is_stalled(),
                "frames queued and nobody to write them"
            );
        }
        // The socket drains; the I/O thread resumes (it was asked, or the writable event
        // comes) and writes the rest.
        let mut turn = flusher.resume(true).expect("nobody holds the turn");
        turn.with(|sink| sink.room = 2);
        run(&queue, Some(turn), true, &asks);
        assert!(queue.lock().unwrap().is_empty());
        let mut turn = flusher.try_flush().expect("the turn is free");
        let mut written = turn.with(|sink| sink.written.clone());
        written.sort_unstable();
        assert_eq!(written, vec![1, 2]);
    });
}

/// Who polls a client's completion queue: a caller drives and stops with its call done while
/// its other call is a future; meanwhile another caller starts to wait for that call without
/// driving. The poller thread is never left standing back with a waiter counted (the
/// waiter, or the driver, calls it back), and two callers never drive at once.
#[test]
fn poll_duty_never_strands_a_waiter() {
    use rpc_sync::PollDuty;
    loom::model(|| {
        let duty = Arc::new(PollDuty::new(true));
        duty.call_started(false, false);
        duty.call_started(false, false);
        let woken = Arc::new(AtomicUsize::new(0));
        let (d, w) = (Arc::clone(&duty), Arc::clone(&woken));
        let waiter = thread::spawn(move || {
            if d.begin_waiting() {
                w.fetch_add(1, Ordering::SeqCst);
            }
        });
        if duty.start_driving() {
            assert!(!duty.start_driving(), "two drivers");
            if duty.stop_driving(true) {
                woken.fetch_add(1, Ordering::SeqCst);
            }
        }
        waiter.join().unwrap();
        assert!(
            !duty.is_standing_back(),
            "the poller stands back while a caller waits without driving"
        );
        duty.end_waiting();
        duty.call_finished(false, false);
        duty.call_finished(false, false);
        assert_eq!(duty.calls_outstanding(), 0);
    });
}

/// An idle client's poller thread stands back while a caller starts a call and waits for
/// it without driving: the poller stands back only if it saw no call, and then the waiter
/// calls it back; it is never left standing back with the waiter counted.
#[test]
fn poll_duty_an_idle_poller_never_strands_a_waiter() {
    use rpc_sync::PollDuty;
    loom::model(|| {
        let duty = Arc::new(PollDuty::new(true));
        let d = Arc::clone(&duty);
        let waiter = thread::spawn(move || {
            d.call_started(false, false);
            d.begin_waiting()
        });
        let stood_back = duty.stand_back_idle();
        let woke = waiter.join().unwrap();
        assert_eq!(
            stood_back, woke,
            "the waiter wakes exactly a poller that stood back"
        );
        assert!(
            !duty.is_standing_back(),
            "the poller stands back while a caller waits without driving"
        );
        duty.end_waiting();
        duty.call_finished(false, false);
        assert!(duty.stand_back_idle(), "idle again");
    });
}

/// A stream opens while a stream reader whose message came stands the poller back: the
/// poller thread is never left standing back with two streams open.
#[test]
fn poll_duty_calls_the_poller_back_for_a_stream() {
    use rpc_sync::PollDuty;
    loom::model(|| {
        let duty = Arc::new(PollDuty::new(true));
        duty.call_started(true, false);
        let d = Arc::clone(&duty);
        let opener = thread::spawn(move || d.call_started(true, false));
        if duty.start_driving() {
            duty.stop_driving_stream(true);
        }
        opener.join().unwrap();
        assert!(
            !duty.is_standing_back(),
            "the poller stands back while two streams are open"
        );
        assert!(!duty.is_driving());
    });
}

/// A call with a deadline starts while the poller thread decides how long to sleep: it never
/// sleeps long (unrung) with the call counted. Either its look sees the call (it sleeps a
/// tick), or the call sees it asleep and rings the queue.
#[test]
fn poll_duty_wakes_an_idle_poller_for_a_deadline() {
    use rpc_sync::PollDuty;
    loom::model(|| {
        let duty = Arc::new(PollDuty::new(false));
        let d = Arc::clone(&duty);
        let caller = thread::spawn(move || d.call_started(false, true));
        let slept_long = duty.idle_wait();
        let rang = caller.join().unwrap().ring;
        assert!(
            !slept_long || rang,
            "the poller sleeps long, unrung, while a call with a deadline is outstanding"
        );
        assert!(
            !(rang && !slept_long),
            "a ring for a poller that did not sleep long"
        );
        if slept_long {
            duty.end_idle_wait();
        }
        duty.call_finished(false, true);
        assert_eq!(duty.deadline_calls(), 0);
        assert!(duty.idle_wait(), "idle again with no deadline outstanding");
    });
}

/// A flag raised after writing data publishes it; of two raisers exactly one wins.
#[test]
fn flag_publishes_and_one_raiser_wins() {
    use rpc_sync::Flag;
    loom::model(|| {
        let flag = Arc::new(Flag::new(false));
        let data = Arc::new(loom::cell::UnsafeCell::new(0u32));
        let (f, d) = (Arc::clone(&flag), Arc::clone(&data));
        let raiser = thread::spawn(move || {
            // SAFETY: nobody reads `data` before the flag is raised.
            d.with_mut(|p| unsafe { *p = 5 });
            f.raise()
        });
        if flag.is_raised() {
            // SAFETY: the raiser wrote `data` before raising, and writes nothing after.
            assert_eq!(data.with(|p| unsafe { *p }), 5);
        }
        let other = flag.raise();
        let first = raiser.join().unwrap();
        assert!(first ^ other, "exactly one raiser wins");
    });
}

/// The credit rule of a connection (rpc-core's `Reposts::release` and `Conn::publish_owed`),
/// on the real `CreditLedger`: a thread that re-posts a receive slot counts it and asks the
/// owner for a step only if the credits due reach the threshold; the owner's step takes the
/// re-posts, sends a CREDIT once the owed credits reach the threshold, then publishes what it
/// still owes (unless that is the figure it published last), which returns the re-posts
/// counted meanwhile. Two releasers race a step (a frame arrived): credits that reach the
/// threshold are never left with nobody to send them (the peer could be waiting for them),
/// and none is lost.
#[test]
fn credits_due_are_never_left_unsent() {
    use rpc_sync::CreditLedger;
    const THRESHOLD: u32 = 2;
    struct Owner {
        owed: u32,
        sent: u32,
        published: u32,
    }
    fn transmit(owner: &mut Owner) {
        if owner.owed >= THRESHOLD {
            owner.sent += owner.owed;
            owner.owed = 0;
        }
    }
    fn step(owner: &mut Owner, ledger: &CreditLedger) {
        owner.owed += ledger.take_released();
        transmit(owner);
        loop {
            if owner.owed == owner.published {
                return;
            }
            let pending = ledger.publish_owed(owner.owed);
            owner.published = owner.owed;
            if pending == 0 || owner.owed + pending < THRESHOLD {
                return;
            }
            owner.owed += ledger.take_released();
            transmit(owner);
        }
    }
    loom::model(|| {
        let ledger = Arc::new(CreditLedger::new());
        let asks = Arc::new(AtomicUsize::new(0));
        let releasers: Vec<_> = (0..2)
            .map(|_| {
                let (l, a) = (Arc::clone(&ledger), Arc::clone(&asks));
                thread::spawn(move || {
                    if l.release() >= u64::from(THRESHOLD) {
                        a.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        // This thread owns the connection: a step for a frame that arrived meanwhile.
        let mut owner = Owner {
            owed: 0,
            sent: 0,
            published: 0,
        };
        step(&mut owner, &ledger);
        for t in releasers {
            t.join().unwrap();
        }
        // The serializer runs every step asked for.
        for _ in 0..asks.load(Ordering::SeqCst) {
            step(&mut owner, &ledger);
        }
        let unsent = owner.owed + ledger.released_pending();
        assert!(
            unsent < THRESHOLD,
            "{unsent} credits due and nobody to send them"
        );
        assert_eq!(owner.sent + unsent, 2, "a credit lost");
    });
}

/// A completion racing a parked receiver: the receiver always gets the value (never sleeps
/// through it), and the value is never read while being written.
#[test]
fn oneshot_wakes_a_parked_receiver() {
    loom::model(|| {
        let slot = Arc::new(Oneshot::new());
        let completer = Arc::clone(&slot);
        let t = thread::spawn(move || assert_ne!(completer.complete(7u32), Completed::Lost));
        assert_eq!(slot.wait(None), Some(7));
        t.join().unwrap();
    });
}

/// A completer leaves the value while it holds something (a connection's state) and wakes
/// the parked receiver only after letting go, as a connection's owner does: the receiver
/// always gets the value and never sleeps through the deferred wake.
#[test]
fn oneshot_deferred_wake_reaches_a_parked_receiver() {
    loom::model(|| {
        let slot = Arc::new(Oneshot::new());
        let held = Arc::new(loom::sync::Mutex::new(()));
        let (completer, state) = (Arc::clone(&slot), Arc::clone(&held));
        let t = thread::spawn(move || {
            let wake = {
                let _owned = state.lock().unwrap();
                completer
                    .complete_deferred(7u32)
                    .expect("the only completion")
            };
            wake.wake();
        });
        assert_eq!(slot.wait(None), Some(7));
        t.join().unwrap();
    });
}

/// Two completers (a reply and a deadline): exactly one wins, and the receiver gets its value.
#[test]
fn oneshot_first_completion_wins() {
    loom::model(|| {
        let slot = Arc::new(Oneshot::new());
        let (a, b) = (Arc::clone(&slot), Arc::clone(&slot));
        let ta = thread::spawn(move || a.complete(1u32) != Completed::Lost);
        let tb = thread::spawn(move || b.complete(2u32) != Completed::Lost);
        let got = slot.wait(None).unwrap();
        let (wa, wb) = (ta.join().unwrap(), tb.join().unwrap());
        assert!(wa ^ wb, "exactly one completion wins");
        assert_eq!(got, if wa { 1 } else { 2 });
    });
}

/// A task re-registers with a new waker while the value arrives: it is woken or sees the
/// value, whichever way the race goes.
#[test]
fn oneshot_task_registration_races_completion() {
    use std::task::{Context, Poll};
    loom::model(|| {
        let slot = Arc::new(Oneshot::new());
        let completer = Arc::clone(&slot);
        let (waker, woken) = flag_waker();
        let mut cx = Context::from_waker(&waker);
        let first = slot.poll_take(&mut cx);
        let t = thread::spawn(move || completer.complete(5u32) != Completed::Lost);
        let second = slot.poll_take(&mut cx);
        t.join().unwrap();
        let got = match (first, second) {
            (Poll::Ready(v), _) | (_, Poll::Ready(v)) => v,
            _ => {
                assert!(
                    woken.load(Ordering::SeqCst),
                    "pending, and the waker never fired"
                );
                slot.try_take().unwrap()
            }
        };
        assert_eq!(got, 5);
    });
}

/// A waker that sets a flag.
fn flag_waker() -> (std::task::Waker, Arc<loom::sync::atomic::AtomicBool>) {
    use loom::sync::atomic::AtomicBool;
    struct Flag(Arc<AtomicBool>);
    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = Arc::new(AtomicBool::new(false));
    let waker = std::task::Waker::from(std::sync::Arc::new(Flag(Arc::clone(&flag))));
    (waker, flag)
}

/// What ran through a serializer, as its last step left it: read without submitting, so an
/// item left queued with nobody to run it shows as missing.
type Ran = loom::sync::Mutex<Vec<u32>>;

/// A serializer step's record of `item`: into the state (a plain cell: two owners at once
/// would be a data race loom reports) and into `ran`.
fn record(log: &mut Vec<u32>, item: u32, ran: &Ran) {
    log.push(item);
    *ran.lock().unwrap() = log.clone();
}

/// Two threads submit work to a serializer while each holds it in turn: every item runs
/// exactly once, one at a time (the state is a plain cell), and every delivery is made.
#[test]
fn serializer_runs_every_item_once_and_delivers() {
    loom::model(|| {
        let s = Arc::new(Serializer::new(Vec::<u32>::new()));
        let ran = Arc::new(Ran::new(Vec::new()));
        let delivered = Arc::new(AtomicUsize::new(0));
        let submit =
            |s: &Serializer<Vec<u32>, u32>, item: u32, ran: &Ran, delivered: &AtomicUsize| {
                s.submit(
                    item,
                    &mut |log: &mut Vec<u32>, w: u32| {
                        record(log, w, ran);
                        // Odd items produce a delivery.
                        (w % 2 == 1).then_some(w)
                    },
                    &mut |_d: u32| {
                        delivered.fetch_add(1, Ordering::SeqCst);
                    },
                )
            };
        let (s2, r2, d2) = (Arc::clone(&s), Arc::clone(&ran), Arc::clone(&delivered));
        let t = thread::spawn(move || {
            submit(&s2, 1, &r2, &d2);
            submit(&s2, 2, &r2, &d2);
        });
        submit(&s, 3, &ran, &delivered);
        t.join().unwrap();
        let log = ran.lock().unwrap().clone();
        let mut sorted = log.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3], "each item exactly once: {log:?}");
        let pos = |x| log.iter().position(|&v| v == x).unwrap();
        assert!(pos(1) < pos(2), "one thread's items in order: {log:?}");
        assert_eq!(delivered.load(Ordering::SeqCst), 2);
    });
}

/// `submit_as`, as the runtime submits the call path's items: an item of its own type runs
/// through `run` when its thread takes the state, and as the work item `queue` made of it,
/// through `step`, when it had to wait; either way exactly once, in its thread's order, beside
/// another thread's plain `submit`s.
#[test]
fn serializer_runs_an_item_of_its_own_type_directly_or_queued() {
    loom::model(|| {
        let s = Arc::new(Serializer::new(Vec::<u32>::new()));
        let ran = Arc::new(Ran::new(Vec::new()));
        // Items are `n * 10`; run directly they are recorded `+ 1`, queued `+ 2`.
        let step = |ran: Arc<Ran>| {
            move |log: &mut Vec<u32>, w: u32| -> Option<()> {
                record(log, w, &ran);
                None
            }
        };
        let (s2, r2) = (Arc::clone(&s), Arc::clone(&ran));
        let t = thread::spawn(move || {
            s2.submit(10, step(Arc::clone(&r2)), |()| {});
            s2.submit(20, step(r2), |()| {});
        });
        s.submit_as(
            3u16,
            |log: &mut Vec<u32>, n: u16, _step: &mut _| {
                record(log, u32::from(n) * 10 + 1, &ran);
                None
            },
            |n| u32::from(n) * 10 + 2,
            step(Arc::clone(&ran)),
            |()| {},
        );
        t.join().unwrap();
        let log = ran.lock().unwrap().clone();
        let items: Vec<u32> = log.iter().map(|v| v / 10).collect();
        let mut sorted = items.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3], "each item exactly once: {log:?}");
        let pos = |x| items.iter().position(|&v| v == x).unwrap();
        assert!(pos(1) < pos(2), "one thread's items in order: {log:?}");
        assert!(
            log.iter()
                .filter(|v| **v > 20)
                .all(|v| v % 10 == 1 || v % 10 == 2),
            "submit_as's items ran through run or as queued: {log:?}"
        );
    });
}

/// Three threads submit at once, one of them two items: the owner that runs a queued item
/// never takes another thread's item in place of the one it counted, so the two-item
/// thread's items run in the order it submitted them. (A thread may push its item and be
/// preempted before counting it: that item must not be run for somebody else's count.)
#[test]
fn serializer_keeps_a_threads_order_among_three() {
    let mut model = loom::model::Builder::new();
    // Three threads are many for an exhaustive search: bound the preemptions (the interleaving
    // that broke the order needs two).
    model.preemption_bound = Some(3);
    model.check(|| {
        fn submit(s: &Serializer<Vec<u32>, u32>, item: u32, ran: &Ran) {
            s.submit(
                item,
                |log: &mut Vec<u32>, w: u32| {
                    record(log, w, ran);
                    None::<()>
                },
                |_| {},
            )
        }
        let s = Arc::new(Serializer::new(Vec::<u32>::new()));
        let ran = Arc::new(Ran::new(Vec::new()));
        let threads: Vec<_> = [vec![1, 2], vec![3], vec![4]]
            .into_iter()
            .map(|items| {
                let (s, ran) = (Arc::clone(&s), Arc::clone(&ran));
                thread::spawn(move || {
                    for item in items {
                        submit(&s, item, &ran);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let log = ran.lock().unwrap().clone();
        let mut sorted = log.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3, 4], "each item exactly once: {log:?}");
        let pos = |x| log.iter().position(|&v| v == x).unwrap();
        assert!(pos(1) < pos(2), "one thread's items in order: {log:?}");
    });
}

/// A delivery submits to the serializer that produced it (a handler's reply, as the runtime
/// does) while another thread submits: every item runs exactly once, the reply included.
#[test]
fn serializer_takes_work_submitted_by_a_delivery() {
    loom::model(|| {
        fn submit(s: &Serializer<Vec<u32>, u32>, item: u32, ran: &Ran) {
            s.submit(
                item,
                |log: &mut Vec<u32>, w: u32| {
                    record(log, w, ran);
                    // Item 1 is a request: its delivery answers it with item 10.
                    (w == 1).then_some(10)
                },
                |reply| submit(s, reply, ran),
            )
        }
        let s = Arc::new(Serializer::new(Vec::<u32>::new()));
        let ran = Arc::new(Ran::new(Vec::new()));
        let (s2, r2) = (Arc::clone(&s), Arc::clone(&ran));
        let t = thread::spawn(move || submit(&s2, 2, &r2));
        submit(&s, 1, &ran);
        t.join().unwrap();
        let log = ran.lock().unwrap().clone();
        let mut sorted = log.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 10], "each item exactly once: {log:?}");
    });
}

/// A producer pushes two messages and closes while the receiver blocks for them: the
/// receiver gets both, in order, then the end; it never sleeps through a push.
#[test]
fn inbox_delivers_in_order_then_ends() {
    loom::model(|| {
        let inbox = Arc::new(Inbox::new());
        let producer = Arc::clone(&inbox);
        let t = thread::spawn(move || {
            assert_ne!(producer.push(1u32), Pushed::Refused);
            assert!(producer.close(Some(2)));
        });
        assert_eq!(inbox.recv(None), Some(Some(1)));
        assert_eq!(inbox.recv(None), Some(Some(2)));
        assert_eq!(inbox.recv(None), Some(None));
        t.join().unwrap();
    });
}

/// Two producers take turns under a lock (as the owners of a connection's state do), each
/// pushing under it and waking the receiver only after letting go: the receiver gets the
/// items in the order they were pushed and never sleeps through a deferred wake.
#[test]
fn inbox_deferred_wakes_keep_order_and_wake_the_receiver() {
    loom::model(|| {
        let inbox = Arc::new(Inbox::new());
        let turn = Arc::new(loom::sync::Mutex::new(0u32));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (inbox, turn) = (Arc::clone(&inbox), Arc::clone(&turn));
                thread::spawn(move || {
                    let wake = {
                        let mut next = turn.lock().unwrap();
                        let item = *next;
                        *next += 1;
                        if item == 1 {
                            inbox.close_deferred(Some(item)).1
                        } else {
                            inbox.push_deferred(item).expect("open")
                        }
                    };
                    wake.wake();
                })
            })
            .collect();
        assert_eq!(inbox.recv(None), Some(Some(0)));
        assert_eq!(inbox.recv(None), Some(Some(1)));
        assert_eq!(inbox.recv(None), Some(None));
        for p in producers {
            p.join().unwrap();
        }
    });
}

/// A task polls while the push races its registration: it sees the item or its waker
/// fires. A receiver that gave up refuses later items.
#[test]
fn inbox_task_registration_races_push() {
    use std::task::{Context, Poll};
    loom::model(|| {
        let inbox = Arc::new(Inbox::new());
        let producer = Arc::clone(&inbox);
        let (waker, woken) = flag_waker();
        let mut cx = Context::from_waker(&waker);
        let t = thread::spawn(move || producer.push(9u32));
        let first = inbox.poll_recv(&mut cx);
        let pushed = t.join().unwrap();
        let got = match first {
            Poll::Ready(v) => v,
            Poll::Pending => {
                assert!(
                    woken.load(Ordering::SeqCst),
                    "pending, and the waker never fired"
                );
                assert_eq!(pushed, Pushed::Woke);
                inbox.try_recv().unwrap()
            }
        };
        assert_eq!(got, Some(9));
        inbox.abandon();
        assert_eq!(inbox.push(10), Pushed::Refused);
    });
}

/// The owner raises the signal while the sender waits for it: the sender always goes on,
/// and the flag is lowered again for the next message.
#[test]
fn signal_wakes_a_waiting_sender() {
    loom::model(|| {
        let signal = Arc::new(Signal::new(false));
        let owner = Arc::clone(&signal);
        let t = thread::spawn(move || {
            owner.raise();
        });
        assert!(signal.take(None));
        assert!(!signal.try_take(), "taking lowers the flag");
        t.join().unwrap();
    });
}

/// A future that is pending until a flag is set, counting its polls.
struct UntilSet {
    flag: Arc<loom::sync::atomic::AtomicBool>,
    polls: Arc<AtomicUsize>,
}

impl std::future::Future for UntilSet {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        // The other thread holds a waker of the task: no need to keep this one.
        self.polls.fetch_add(1, Ordering::SeqCst);
        if self.flag.load(Ordering::SeqCst) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

/// A scheduler that runs tasks in a queue drained by the test.
#[derive(Clone, Default)]
struct Queue(Arc<loom::sync::Mutex<Vec<std::sync::Arc<dyn rpc_sync::Runnable>>>>);

impl rpc_sync::Schedule for Queue {
    fn schedule(&self, task: std::sync::Arc<dyn rpc_sync::Runnable>) {
        self.0.lock().unwrap().push(task);
    }
}

/// A wake racing the task's poll is never lost: whether it lands before, during or after
/// the poll, the task runs again and finishes; it is never queued twice.
#[test]
fn task_wake_racing_its_poll_is_not_lost() {
    use rpc_sync::{Runnable, Task};
    loom::model(|| {
        let flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let polls = Arc::new(AtomicUsize::new(0));
        let queue = Queue::default();
        let task = Task::new(
            UntilSet {
                flag: Arc::clone(&flag),
                polls: Arc::clone(&polls),
            },
            queue.clone(),
        );
        let waker = std::task::Waker::from(std::sync::Arc::clone(&task));
        let f = Arc::clone(&flag);
        let t = thread::spawn(move || {
            f.store(true, Ordering::SeqCst);
            waker.wake();
        });
        std::sync::Arc::clone(&task).run();
        t.join().unwrap();
        loop {
            let next = queue.0.lock().unwrap().pop();
            match next {
                Some(runnable) => runnable.run(),
                None => break,
            }
        }
        assert!(
            task.is_done(),
            "the wake was lost after {} polls, flag {}",
            polls.load(Ordering::SeqCst),
            flag.load(Ordering::SeqCst)
        );
        assert!(queue.0.lock().unwrap().is_empty());
    });
}

/// Cancelling an idle task drops its future without polling it again.
#[test]
fn task_cancel_drops_the_future() {
    use rpc_sync::{Runnable, Task};
    loom::model(|| {
        let flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let polls = Arc::new(AtomicUsize::new(0));
        let queue = Queue::default();
        let task = Task::new(
            UntilSet {
                flag,
                polls: Arc::clone(&polls),
            },
            queue.clone(),
        );
        std::sync::Arc::clone(&task).run();
        let other = std::sync::Arc::clone(&task);
        let t = thread::spawn(move || other.cancel());
        t.join().unwrap();
        while let Some(r) = queue.0.lock().unwrap().pop() {
            r.run();
        }
        assert!(task.is_done());
        assert_eq!(polls.load(Ordering::SeqCst), 1);
    });
}

/// A finished task is renewed (its allocation reused for the next future) only when nobody
/// else holds it: a waker held by another thread, woken and dropped at any point around the
/// renewal, never schedules the task, and the renewed task runs its new future to the end;
/// while the waker is held, renewing is refused, and once it is dropped it succeeds.
#[test]
fn task_renew_only_when_unshared() {
    use rpc_sync::{Runnable, Task};
    loom::model(|| {
        let polls = Arc::new(AtomicUsize::new(0));
        let queue = Queue::default();
        let ready = |polls: &Arc<AtomicUsize>| UntilSet {
            flag: Arc::new(loom::sync::atomic::AtomicBool::new(true)),
            polls: Arc::clone(polls),
        };
        let mut task = Task::new(ready(&polls), queue.clone());
        std::sync::Arc::clone(&task).run();
        assert!(task.is_done());
        let waker = std::task::Waker::from(std::sync::Arc::clone(&task));
        let t = thread::spawn(move || waker.wake());
        let renewed = Task::renew(&mut task, || ready(&polls), queue.clone());
        t.join().unwrap();
        assert!(
            queue.0.lock().unwrap().is_empty(),
            "a wake of a finished task scheduled it"
        );
        if renewed.is_err() {
            assert_eq!(polls.load(Ordering::SeqCst), 1);
            assert!(
                Task::renew(&mut task, || ready(&polls), queue.clone()).is_ok(),
                "refused with no other holder"
            );
        }
        assert!(!task.is_done(), "a renewed task is scheduled, not done");
        std::sync::Arc::clone(&task).run();
        assert!(task.is_done());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    });
}

/// Two workers block for work while items are queued one by one: both items are taken,
/// each by one worker; no worker sleeps through an item meant for it.
#[test]
fn work_queue_wakes_a_parked_worker_per_item() {
    loom::model(|| {
        let queue = Arc::new(WorkQueue::with_capacity(1));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let queue = Arc::clone(&queue);
                thread::spawn(move || queue.pop())
            })
            .collect();
        queue.push(1u32);
        queue.push(2u32);
        let mut taken: Vec<u32> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        taken.sort_unstable();
        assert_eq!(taken, vec![1, 2]);
        assert_eq!(queue.try_pop(), None);
    });
}

/// One producer's items come out in the order it queued them.
#[test]
fn work_queue_keeps_a_producers_order() {
    loom::model(|| {
        let queue = Arc::new(WorkQueue::with_capacity(1));
        let producer = {
            let queue = Arc::clone(&queue);
            thread::spawn(move || {
                queue.push(1u32);
                queue.push(2u32);
            })
        };
        assert_eq!(queue.pop(), 1);
        assert_eq!(queue.pop(), 2);
        producer.join().unwrap();
        assert!(queue.is_empty());
    });
}

/// Two threads reserve from and release to one budget while a third takes what is left:
/// the count never passes the limit, and everything reserved comes back.
#[test]
fn byte_budget_never_exceeds_its_limit() {
    use rpc_sync::ByteBudget;
    loom::model(|| {
        let budget = Arc::new(ByteBudget::new(5));
        let reserve_and_release = |budget: Arc<ByteBudget>| {
            thread::spawn(move || {
                if budget.try_reserve(3) {
                    assert!(budget.used() <= budget.limit());
                    budget.release(3);
                }
            })
        };
        let a = reserve_and_release(Arc::clone(&budget));
        let b = reserve_and_release(Arc::clone(&budget));
        let took = budget.reserve_up_to(4);
        assert!(budget.used() <= budget.limit());
        budget.release(took);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(budget.used(), 0);
    });
}

/// A holder finds the pool empty while another gives its slot back: either the taker gets the
/// slot or the giver is told to name the taker, whose next take gets it; never neither.
#[test]
fn slot_pool_never_strands_a_waiter() {
    use rpc_sync::SlotPool;
    loom::model(|| {
        let pool = Arc::new(SlotPool::new(1));
        let slot = pool.take(1).unwrap();
        let giver = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.give(slot))
        };
        let took = pool.take(2);
        let named = giver.join().unwrap();
        match took {
            Some(_) => assert_eq!(named, None),
            None => {
                assert_eq!(named, Some(2));
                assert_eq!(pool.take(3), None, "kept for the waiter");
                assert_eq!(pool.take(2), Some(slot));
            }
        }
    });
}

/// The same with places given back in a batch (`give_many`, a verbs link's covered SENDs):
/// the taker gets one, or is named among those told and gets the one kept for it.
#[test]
fn slot_pool_given_many_never_strands_a_waiter() {
    use rpc_sync::SlotPool;
    loom::model(|| {
        let pool = Arc::new(SlotPool::with_slots(vec![(); 2]));
        let taken = [pool.take(1), pool.take(1)];
        let giver = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || {
                let mut told = Vec::new();
                pool.give_many(taken.into_iter().flatten(), &mut told);
                told
            })
        };
        let took = pool.take(2);
        let told = giver.join().unwrap();
        match took {
            Some(()) => assert!(told.is_empty()),
            None => {
                assert_eq!(told, vec![2]);
                assert_eq!(pool.take(2), Some(()));
            }
        }
    });
}

/// Two callers of a `SingleFlight` (a client's reconnect): the work never runs on both at
/// once, and each caller gets a result, its own run's or the one it waited for.
#[test]
fn single_flight_runs_once_at_a_time() {
    use rpc_sync::SingleFlight;
    loom::model(|| {
        let flight = Arc::new(SingleFlight::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let call = |flight: &SingleFlight<usize>, inside: &AtomicUsize, runs: &AtomicUsize| {
            flight.run(None, || {
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two runs at once");
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                inside.fetch_sub(1, Ordering::SeqCst);
                run
            })
        };
        let other = {
            let (flight, inside, runs) = (flight.clone(), inside.clone(), runs.clone());
            thread::spawn(move || call(&flight, &inside, &runs))
        };
        let mine = call(&flight, &inside, &runs).expect("a result");
        let theirs = other.join().unwrap().expect("a result");
        let runs = runs.load(Ordering::SeqCst);
        // One run shared by both, or one each.
        assert!((runs == 1 && mine == theirs) || (runs == 2 && mine != theirs));
        assert!(flight.is_idle());
    });
}

/// Two callers arrive while a third runs the work: each gets its result (none sleeps through
/// the landing), and once both took it nothing is kept.
#[test]
fn single_flight_hands_every_waiter_the_result() {
    use rpc_sync::SingleFlight;
    loom::model(|| {
        let flight = Arc::new(SingleFlight::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let spawn = || {
            let (flight, runs) = (flight.clone(), runs.clone());
            thread::spawn(move || flight.run(None, || runs.fetch_add(1, Ordering::SeqCst) + 10))
        };
        let (a, b) = (spawn(), spawn());
        let mine = flight.run(None, || runs.fetch_add(1, Ordering::SeqCst) + 10);
        let results = [mine, a.join().unwrap(), b.join().unwrap()];
        let runs = runs.load(Ordering::SeqCst);
        for result in results {
            let run = result.expect("every caller gets a result");
            assert!(
                (10..10 + runs).contains(&run),
                "the result of a run that happened"
            );
        }
        assert!(flight.is_idle(), "the result is not kept once taken");
    });
}

/// A caller that gives up at once (a zero timeout: the timed-out path, which loom's timed
/// wait does not otherwise take) beside two that wait: those get a result, the one that gave
/// up none or its own run's, and once all are done nothing is kept.
#[test]
fn single_flight_keeps_nothing_after_a_waiter_gives_up() {
    use rpc_sync::SingleFlight;
    use std::time::Duration;
    loom::model(|| {
        let flight = Arc::new(SingleFlight::new());
        let patient = {
            let flight = flight.clone();
            thread::spawn(move || flight.run(None, || 1u32))
        };
        let hasty = {
            let flight = flight.clone();
            thread::spawn(move || flight.run(Some(Duration::ZERO), || 2u32))
        };
        assert!(flight.run(None, || 3u32).is_some());
        assert!(patient.join().unwrap().is_some());
        if let Some(got) = hasty.join().unwrap() {
            assert!((1..=3).contains(&got));
        }
        assert!(flight.is_idle(), "a result kept after every caller left");
    });
}

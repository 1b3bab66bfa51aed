//! [`SingleFlight`]: work that one thread does for every thread that needs it at the same
//! time (a client's reconnect): the first to ask runs it, and those that ask while it runs
//! wait for its result instead of running it again.

use std::time::{Duration, Instant};

use crate::primitive::{Condvar, Mutex};

/// What the lock covers.
struct State<T> {
    /// A thread is running the work.
    running: bool,
    /// Runs finished so far (wrapping): a waiter tells the end of the run it waits for.
    landed: u64,
    /// Threads waiting for a run's result.
    waiting: usize,
    /// The result of the last run, while threads that waited for it have not all taken it.
    last: Option<T>,
}

/// Work run by one thread at a time, its result shared with the threads that asked for it
/// meanwhile.
///
/// Protocol and guarantees:
/// - [`SingleFlight::run`] runs the work on the calling thread if no other thread is running
///   it; otherwise it waits for that run to end and returns a clone of its result. Never do
///   two threads run the work at once (the loom model `single_flight_runs_once_at_a_time`).
/// - A waiter is never left behind: it registers under the lock the runner takes to land
///   its result, and the runner wakes every waiter after landing (the loom model
///   `single_flight_hands_every_waiter_the_result`).
/// - A result is kept only until the last of the threads that waited took it or gave up: a
///   finished run holds nothing (a connection closed later is not kept alive by it).
/// - Work that panics lands no result: its waiters return `None`, and the next `run` runs
///   the work again.
///
/// The lock is short: the work runs outside it, and waiters sleep on a condition variable
/// that releases it.
pub struct SingleFlight<T> {
    state: Mutex<State<T>>,
    landed: Condvar,
}

impl<T: Clone> Default for SingleFlight<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> SingleFlight<T> {
    /// Nothing running.
    pub fn new() -> Self {
        SingleFlight {
            state: Mutex::new(State {
                running: false,
                landed: 0,
                waiting: 0,
                last: None,
            }),
            landed: Condvar::new(),
        }
    }

    /// Runs `work` here, unless another thread is running it: then waits up to `timeout`
    /// (`None`: for as long as it runs) for that run's result, or a later run's if one landed
    /// before this thread woke. `None` when the wait timed out or the run panicked.
    pub fn run(&self, timeout: Option<Duration>, work: impl FnOnce() -> T) -> Option<T> {
        let mut state = self.state.lock();
        if !state.running {
            state.running = true;
            drop(state);
            let mut landing = Landing {
                flight: self,
                result: None,
            };
            let result = work();
            landing.result = Some(result.clone());
            drop(landing);
            return Some(result);
        }
        let run = state.landed;
        state.waiting += 1;
        crate::assert_unlocked("waiting for another thread's run");
        // A timeout too long to add is none.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        while state.landed == run {
            match deadline {
                None => state = self.landed.wait(state),
                Some(deadline) => {
                    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    state = self.landed.wait_timeout(state, left).0;
                }
            }
        }
        state.waiting -= 1;
        let timed_out = state.landed == run;
        let result = match state.waiting {
            // The last waiter takes what is kept (a timed-out one: a result kept for waiters
            // of an earlier run, all gone now), so that nothing is kept.
            0 => state.last.take(),
            _ if timed_out => None,
            _ => state.last.clone(),
        };
        drop(state);
        // Timed out: the run goes on, and its result is for the others.
        result.filter(|_| !timed_out)
    }

    /// Threads waiting for a run's result now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state.lock().waiting
    }

    /// Whether no run is going on and no result is kept (a snapshot).
    pub fn is_idle(&self) -> bool {
        let state = self.state.lock();
        !state.running && state.last.is_none()
    }
}

/// Ends a run, its work returned or panicked: lands the result for the waiters (if any), and
/// wakes them.
struct Landing<'a, T> {
    flight: &'a SingleFlight<T>,
    result: Option<T>,
}

impl<T> Drop for Landing<'_, T> {
    fn drop(&mut self) {
        let (waiters, displaced) = {
            let mut state = self.flight.state.lock();
            state.running = false;
            state.landed = state.landed.wrapping_add(1);
            // Kept for the waiters only; what an earlier run left for waiters that did not
            // all wake yet is replaced (they get this run's result).
            let kept = self.result.take().filter(|_| state.waiting > 0);
            let displaced = std::mem::replace(&mut state.last, kept);
            (state.waiting > 0, displaced)
        };
        // Outside the lock: the last reference to a connection, say, may go with it.
        drop(displaced);
        if waiters {
            self.flight.landed.notify_all();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Until `flight` has `n` waiters (at most 20 s: a loaded machine).
    fn until_waiting<T: Clone>(flight: &SingleFlight<T>, n: usize) {
        let since = Instant::now();
        while flight.waiting() != n {
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "{n} waiters never came"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn callers_during_a_run_share_its_result() {
        let flight = Arc::new(SingleFlight::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let (started_tx, started) = std::sync::mpsc::channel();
        let leader = {
            let (flight, runs) = (flight.clone(), runs.clone());
            std::thread::spawn(move || {
                let shared = flight.clone();
                flight.run(None, move || {
                    started_tx.send(()).unwrap();
                    // The others find the run going on.
                    until_waiting(&shared, 4);
                    runs.fetch_add(1, Ordering::SeqCst) + 1
                })
            })
        };
        started.recv().unwrap();
        let followers: Vec<_> = (0..4)
            .map(|_| {
                let (flight, runs) = (flight.clone(), runs.clone());
                std::thread::spawn(move || {
                    flight.run(None, || runs.fetch_add(1, Ordering::SeqCst) + 1)
                })
            })
            .collect();
        assert_eq!(leader.join().unwrap(), Some(1));
        for follower in followers {
            assert_eq!(follower.join().unwrap(), Some(1), "the leader's result");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one run for all five");
        assert!(flight.is_idle(), "nothing kept once every waiter took it");
        assert_eq!(flight.run(None, || 9), Some(9), "a later call runs again");
    }

    #[test]
    fn a_waiter_gives_up_at_its_timeout_and_a_panic_frees_the_next_run() {
        let flight = Arc::new(SingleFlight::<u32>::new());
        let (started_tx, started) = std::sync::mpsc::channel();
        let leader = {
            let flight = flight.clone();
            std::thread::spawn(move || {
                let shared = flight.clone();
                flight.run(None, move || {
                    started_tx.send(()).unwrap();
                    // The waiter came, and gave up.
                    until_waiting(&shared, 1);
                    until_waiting(&shared, 0);
                    panic!("the work failed");
                })
            })
        };
        started.recv().unwrap();
        assert_eq!(flight.run(Some(Duration::from_millis(20)), || 1), None);
        assert!(leader.join().is_err(), "the leader's panic went on");
        assert!(flight.is_idle());
        assert_eq!(flight.run(None, || 2), Some(2));
    }
}

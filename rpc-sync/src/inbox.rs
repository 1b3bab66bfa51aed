//! [`Inbox`]: the messages of one streaming call, pushed by whichever thread owns the
//! connection and taken by the one thread or task that reads the stream; [`Signal`]: a
//! re-armable "go on" from the connection's owner to a stream's sender (its previous message
//! left the send queue).
//!
//! Both keep their state under a short internal lock that is never held while waking,
//! parking or running anything else: the waiter is taken out under the lock and woken after
//! it is released. What an inbox holds is bounded by its producer (the runtime pushes only
//! what the call's flow-control window let the peer send).

use std::collections::VecDeque;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::park::{park, park_timeout};
use crate::primitive::{current, Mutex};
use crate::wake::{Waiter, Wake};

/// What [`Inbox::push`] did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued; nobody was waiting.
    Stored,
    /// Queued, and the waiting thread or task was woken.
    Woke,
    /// Dropped: the inbox is closed or its receiver gave up.
    Refused,
}

struct InboxState<T> {
    items: VecDeque<T>,
    /// No more items will be pushed.
    closed: bool,
    /// The receiver is gone: items are dropped on arrival.
    abandoned: bool,
    waiter: Option<Waiter>,
}

/// A queue of items from producers (serialized by the caller) to one receiver, which
/// blocks ([`Inbox::recv`]) or polls ([`Inbox::poll_recv`]) for them. After
/// [`Inbox::close`] the receiver drains what is queued and then sees the end (`None`).
pub struct Inbox<T> {
    state: Mutex<InboxState<T>>,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Inbox<T> {
    /// An empty, open inbox.
    pub fn new() -> Self {
        Inbox {
            state: Mutex::new(InboxState {
                items: VecDeque::new(),
                closed: false,
                abandoned: false,
                waiter: None,
            }),
        }
    }

    /// Queues `item` and wakes the receiver if it waits.
    pub fn push(&self, item: T) -> Pushed {
        match self.push_deferred(item) {
            Ok(wake) => {
                if wake.wake() {
                    Pushed::Woke
                } else {
                    Pushed::Stored
                }
            }
            Err(_) => Pushed::Refused,
        }
    }

    /// Queues `item` like [`Inbox::push`], but leaves waking the receiver to the returned
    /// [`Wake`]: a producer that keeps its items in order by pushing them while it holds
    /// something (a connection's state) wakes the receiver after letting go. `Err(item)`
    /// when the inbox is closed or abandoned.
    pub fn push_deferred(&self, item: T) -> Result<Wake, T> {
        let mut s = self.state.lock();
        if s.closed || s.abandoned {
            return Err(item);
        }
        s.items.push_back(item);
        Ok(Wake(s.waiter.take()))
    }

    /// Queues `last` (if any) and ends the inbox: the receiver sees `None` once it took
    /// everything. Later pushes and closes are refused; returns whether this call closed it.
    pub fn close(&self, last: Option<T>) -> bool {
        let (closed, wake) = self.close_deferred(last);
        wake.wake();
        closed
    }

    /// [`Inbox::close`], leaving the wake-up to the returned [`Wake`] (see
    /// [`Inbox::push_deferred`]); the flag says whether this call closed the inbox.
    pub fn close_deferred(&self, last: Option<T>) -> (bool, Wake) {
        let mut s = self.state.lock();
        if s.closed {
            return (false, Wake(None));
        }
        s.closed = true;
        if !s.abandoned {
            s.items.extend(last);
        }
        (true, Wake(s.waiter.take()))
    }

    /// The receiver gives up: queued items are dropped now, later ones on arrival.
    pub fn abandon(&self) {
        let dropped = {
            let mut s = self.state.lock();
            s.abandoned = true;
            s.waiter = None;
            std::mem::take(&mut s.items)
        };
        drop(dropped);
    }

    /// Whether the inbox was closed (its items may not all be taken yet).
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Items queued and not taken yet.
    pub fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next item if one is queued: `Ok(Some)`, `Ok(None)` at the end, `Err(())` when
    /// the inbox is empty but still open.
    #[allow(clippy::result_unit_err)]
    pub fn try_recv(&self) -> Result<Option<T>, ()> {
        let mut s = self.state.lock();
        match s.items.pop_front() {
            Some(item) => Ok(Some(item)),
            None if s.closed || s.abandoned => Ok(None),
            None => Err(()),
        }
    }

    /// Polls from a task: the next item, `None` at the end, or `Pending` with the task's
    /// waker registered.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.state.lock();
        match s.items.pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            None if s.closed || s.abandoned => Poll::Ready(None),
            None => {
                Waiter::register_task(&mut s.waiter, cx);
                Poll::Pending
            }
        }
    }

    /// Blocks the calling thread for the next item (`Some(Some)`), the end (`Some(None)`),
    /// or until `deadline` passes (`None`).
    pub fn recv(&self, deadline: Option<Instant>) -> Option<Option<T>> {
        loop {
            {
                let mut s = self.state.lock();
                if let Some(item) = s.items.pop_front() {
                    return Some(Some(item));
                }
                if s.closed || s.abandoned {
                    return Some(None);
                }
                s.waiter = Some(Waiter::Thread(current()));
            }
            match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        let mut s = self.state.lock();
                        s.waiter = None;
                        return match s.items.pop_front() {
                            Some(item) => Some(Some(item)),
                            None if s.closed || s.abandoned => Some(None),
                            None => None,
                        };
                    }
                    park_timeout(d - now);
                }
                None => park(),
            }
        }
    }
}

struct SignalState {
    raised: bool,
    waiter: Option<Waiter>,
}

/// A flag one side raises and the other waits for and lowers (a binary semaphore with one
/// waiter): "your previous message left the queue, send the next".
pub struct Signal {
    state: Mutex<SignalState>,
}

impl Signal {
    /// A signal, raised or not.
    pub fn new(raised: bool) -> Self {
        Signal {
            state: Mutex::new(SignalState {
                raised,
                waiter: None,
            }),
        }
    }

    /// Raises the flag and wakes the waiter if there is one; returns whether it woke one.
    pub fn raise(&self) -> bool {
        let waiter = {
            let mut s = self.state.lock();
            s.raised = true;
            s.waiter.take()
        };
        match waiter {
            Some(w) => {
                w.wake();
                true
            }
            None => false,
        }
    }

    /// Lowers the flag if it is raised; returns whether it was.
    pub fn try_take(&self) -> bool {
        std::mem::replace(&mut self.state.lock().raised, false)
    }

    /// Polls from a task: `Ready` (the flag lowered again) once raised, else `Pending`
    /// with the task's waker registered.
    pub fn poll_take(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.state.lock();
        if std::mem::replace(&mut s.raised, false) {
            return Poll::Ready(());
        }
        Waiter::register_task(&mut s.waiter, cx);
        Poll::Pending
    }

    /// Blocks until the flag is raised (then lowers it: `true`) or `deadline` passes
    /// (`false`).
    pub fn take(&self, deadline: Option<Instant>) -> bool {
        loop {
            {
                let mut s = self.state.lock();
                if std::mem::replace(&mut s.raised, false) {
                    return true;
                }
                s.waiter = Some(Waiter::Thread(current()));
            }
            match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        let mut s = self.state.lock();
                        s.waiter = None;
                        return std::mem::replace(&mut s.raised, false);
                    }
                    park_timeout(d - now);
                }
                None => park(),
            }
        }
    }
}

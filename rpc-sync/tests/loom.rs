//! Loom models of the hand-off primitives. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rpc-sync --release --test loom`
//! (`make loom`; part of `make test`).
#![cfg(loom)]

use loom::sync::atomic::{fence, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use rpc_sync::Exclusive;

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

/// The hand-over rule the completion-queue drivers follow: a producer publishes work, then
/// tries to own the consumer; the owner re-checks for work after letting go. Every item of
/// work is consumed by somebody, whichever thread ends up owning.
#[test]
fn work_left_for_the_owner_is_never_stranded() {
    fn produce_and_drive(queue: &AtomicUsize, owner: &Exclusive<usize>) {
        queue.fetch_add(1, Ordering::SeqCst);
        loop {
            fence(Ordering::SeqCst);
            let Some(mut g) = owner.try_lock() else {
                return; // the owner re-checks after letting go
            };
            g.with(|done| *done += queue.swap(0, Ordering::SeqCst));
            drop(g);
            fence(Ordering::SeqCst);
            if queue.load(Ordering::SeqCst) == 0 {
                return;
            }
        }
    }
    loom::model(|| {
        let queue = Arc::new(AtomicUsize::new(0));
        let owner = Arc::new(Exclusive::new(0usize));
        let (q, o) = (Arc::clone(&queue), Arc::clone(&owner));
        let other = thread::spawn(move || produce_and_drive(&q, &o));
        produce_and_drive(&queue, &owner);
        other.join().unwrap();
        assert_eq!(queue.load(Ordering::SeqCst), 0, "work stranded");
        let mut g = owner.try_lock().expect("nobody owns it any more");
        assert_eq!(g.with(|done| *done), 2);
    });
}

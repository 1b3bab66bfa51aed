//! [`LazyBox`]: an optional box whose drop looks for nothing inline.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

/// An `Option<Box<T>>` for parts most records never hold. Dropping one that holds nothing is
/// a comparison where the record dies: the compiler's own drop of an `Option<Box<T>>` with
/// a large `T` is out of line and saves its registers before it looks (about 17
/// instructions per call record, BENCHMARKS.md).
#[derive(Debug)]
pub(super) struct LazyBox<T>(ManuallyDrop<Option<Box<T>>>);

impl<T> LazyBox<T> {
    /// Nothing held (nothing allocated).
    pub(super) const fn none() -> Self {
        LazyBox(ManuallyDrop::new(None))
    }
}

impl<T> Deref for LazyBox<T> {
    type Target = Option<Box<T>>;

    #[inline(always)]
    fn deref(&self) -> &Option<Box<T>> {
        &self.0
    }
}

impl<T> DerefMut for LazyBox<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Option<Box<T>> {
        &mut self.0
    }
}

impl<T> Drop for LazyBox<T> {
    // Inlined: the look for nothing stays where the owner dies. The field itself is never
    // dropped (`ManuallyDrop`): it is `None` once this ran.
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            drop_held(held);
        }
    }
}

#[inline(never)]
fn drop_held<T>(held: Box<T>) {
    drop(held);
}

#[cfg(test)]
mod tests {
    use super::LazyBox;
    use std::rc::Rc;

    #[test]
    fn what_it_holds_is_dropped_with_it() {
        let shared = Rc::new(());
        let mut lazy = LazyBox::none();
        assert!(lazy.is_none());
        *lazy = Some(Box::new(Rc::clone(&shared)));
        assert_eq!(Rc::strong_count(&shared), 2);
        drop(lazy);
        assert_eq!(Rc::strong_count(&shared), 1);
    }
}

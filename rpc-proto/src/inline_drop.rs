//! [`InlineDrop`]: an `Option` whose drop looks for `None` where its owner dies.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

/// An `Option<T>` that is almost always `None` on the call path: a call record's rare
/// parts, a request's extensions, a trace span nobody enabled. The compiler's own drop of
/// such an option is often out of line, with its registers saved before it looks (about 17
/// instructions each time); this one looks inline and calls out only for `Some`.
///
/// ```
/// use rpc_proto::InlineDrop;
/// let mut rare: InlineDrop<Box<Vec<u8>>> = InlineDrop::new(None);
/// rare.get_or_insert_with(Box::default).push(1);
/// assert_eq!(rare.as_deref().map(Vec::len), Some(1));
/// ```
#[derive(Clone, Debug, Default)]
pub struct InlineDrop<T>(ManuallyDrop<Option<T>>);

impl<T> InlineDrop<T> {
    /// Holding `value` (`None` allocates nothing).
    #[inline(always)]
    pub const fn new(value: Option<T>) -> Self {
        InlineDrop(ManuallyDrop::new(value))
    }
}

impl<T> Deref for InlineDrop<T> {
    type Target = Option<T>;

    #[inline(always)]
    fn deref(&self) -> &Option<T> {
        &self.0
    }
}

impl<T> DerefMut for InlineDrop<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Option<T> {
        &mut self.0
    }
}

impl<T> Drop for InlineDrop<T> {
    // The field itself is never dropped (`ManuallyDrop`): it is `None` once this ran.
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            drop_value(value);
        }
    }
}

#[inline(never)]
fn drop_value<T>(value: T) {
    drop(value);
}

#[cfg(test)]
mod tests {
    use super::InlineDrop;
    use std::rc::Rc;

    #[test]
    fn what_it_holds_is_dropped_with_it() {
        let shared = Rc::new(());
        let mut held = InlineDrop::new(None);
        assert!(held.is_none());
        *held = Some(Rc::clone(&shared));
        let copy = held.clone();
        assert_eq!(Rc::strong_count(&shared), 3);
        drop((held, copy));
        assert_eq!(Rc::strong_count(&shared), 1);
    }
}

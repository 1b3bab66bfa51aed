//! [`CallTable`]: a connection's call records by call id, found without hashing.
//!
//! Call ids on a connection rise one by one (a client numbers its calls in order, and a
//! server accepts them only in rising order), and only `max_calls` of them are open at once.
//! So a call's id modulo a power of two at least twice the number of open calls names a slot
//! that is almost always its own: the table keeps each record in that slot. A call whose slot
//! is still held by an older call (a long-lived stream among many short calls, or ids a peer
//! chose to collide) goes to an overflow map, looked at only when it holds something.
//!
//! Bound: the slots grow (doubling) only when an insert finds its slot taken while at least
//! half of them are in use, so there are never more than four times as many as the most
//! records held at once, which the protocol bounds (`max_calls`, plus calls waiting for their
//! CANCEL to leave); the overflow holds records only.

use foldhash::{HashMap, HashMapExt};

/// Slots of a table's first allocation (made by its first insert).
const FIRST_SLOTS: usize = 8;

/// Call records by id; see the module docs.
#[derive(Debug)]
pub(super) struct CallTable<V> {
    /// Records by `id & (slots.len() - 1)`; empty until the first insert.
    slots: Vec<Option<(u64, V)>>,
    /// Records whose slot was taken when they were inserted.
    overflow: HashMap<u64, V>,
    len: usize,
}

impl<V> CallTable<V> {
    pub(super) fn new() -> Self {
        CallTable {
            slots: Vec::new(),
            overflow: HashMap::new(),
            len: 0,
        }
    }

    /// How many records the table holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no record.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn slot_of(&self, id: u64) -> Option<usize> {
        // `slots.len()` is 0 or a power of two.
        let mask = self.slots.len().checked_sub(1)?;
        Some(id as usize & mask)
    }

    #[inline]
    pub(super) fn get(&self, id: &u64) -> Option<&V> {
        if let Some(Some((held, record))) = self.slot_of(*id).map(|i| &self.slots[i]) {
            if held == id {
                return Some(record);
            }
        }
        if self.overflow.is_empty() {
            return None;
        }
        self.overflow.get(id)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut V> {
        let in_slot = self
            .slot_of(*id)
            .is_some_and(|i| matches!(&self.slots[i], Some((held, _)) if held == id));
        if in_slot {
            let i = self.slot_of(*id)?;
            return self.slots[i].as_mut().map(|(_, record)| record);
        }
        if self.overflow.is_empty() {
            return None;
        }
        self.overflow.get_mut(id)
    }

    /// Inserts the record of `id`, which the table must not hold yet (a call id is opened
    /// once).
    #[inline]
    pub(super) fn insert(&mut self, id: u64, record: V) {
        debug_assert!(self.get(&id).is_none(), "call {id} inserted twice");
        self.len += 1;
        if let Some(i) = self.slot_of(id) {
            if self.slots[i].is_none() {
                self.slots[i] = Some((id, record));
                return;
            }
        }
        self.insert_slow(id, record);
    }

    /// An insert whose slot is taken (or a table without slots): grow if at least half the
    /// slots are in use, else keep the record in the overflow.
    #[cold]
    fn insert_slow(&mut self, id: u64, record: V) {
        let in_slots = self.len - 1 - self.overflow.len();
        if in_slots * 2 >= self.slots.len() {
            self.grow();
            if let Some(i) = self.slot_of(id) {
                if self.slots[i].is_none() {
                    self.slots[i] = Some((id, record));
                    return;
                }
            }
        }
        self.overflow.insert(id, record);
    }

    /// Doubles the slots (or makes the first ones) and places every record anew.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(FIRST_SLOTS);
        let mut slots = Vec::with_capacity(size);
        slots.resize_with(size, || None);
        let old = std::mem::replace(&mut self.slots, slots);
        let overflow = std::mem::take(&mut self.overflow);
        let mask = size - 1;
        for (id, record) in old.into_iter().flatten().chain(overflow) {
            match &mut self.slots[id as usize & mask] {
                free @ None => *free = Some((id, record)),
                Some(_) => {
                    self.overflow.insert(id, record);
                }
            }
        }
    }

    #[inline(always)]
    pub(super) fn remove(&mut self, id: &u64) -> Option<V> {
        if let Some(i) = self.slot_of(*id) {
            if matches!(&self.slots[i], Some((held, _)) if held == id) {
                self.len -= 1;
                return self.slots[i].take().map(|(_, record)| record);
            }
        }
        if self.overflow.is_empty() {
            return None;
        }
        let removed = self.overflow.remove(id);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    /// Every record, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&u64, &V)> {
        let in_slots = self.slots.iter().flatten().map(|(id, record)| (id, record));
        in_slots.chain(self.overflow.iter())
    }

    /// Every record, mutably, in no particular order.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut V)> {
        let in_slots = self
            .slots
            .iter_mut()
            .flatten()
            .map(|(id, record)| (&*id, record));
        in_slots.chain(self.overflow.iter_mut())
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, record)| record)
    }

    /// Takes every record out, in no particular order; the slots stay allocated.
    pub(super) fn drain(&mut self) -> Vec<(u64, V)> {
        self.len = 0;
        let mut all: Vec<(u64, V)> = self.slots.iter_mut().filter_map(Option::take).collect();
        all.extend(self.overflow.drain());
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a map, over rising ids with long-lived entries among short ones (the shape of
    /// streams among unary calls) and ids chosen to collide: every operation agrees, and the
    /// slots never exceed four times the most records held.
    #[test]
    fn call_table_agrees_with_a_map() {
        let mut table = CallTable::new();
        let mut map = std::collections::BTreeMap::new();
        let mut most = 0usize;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut id = 0u64;
        for step in 0..20_000u64 {
            let r = next();
            if r % 3 != 0 || map.is_empty() {
                // Rising ids, now and then a jump that lands on a taken slot.
                id += if r % 17 == 0 { 64 } else { 1 };
                table.insert(id, step);
                map.insert(id, step);
            } else {
                // Mostly the oldest go (short calls), some stay for long (streams).
                let keys: Vec<u64> = map.keys().copied().collect();
                let victim = if r % 5 == 0 {
                    keys[(r as usize / 7) % keys.len()]
                } else {
                    keys[0]
                };
                if victim % 97 != 0 || r % 11 == 0 {
                    assert_eq!(table.remove(&victim), map.remove(&victim));
                }
            }
            let probe = next() % (id + 2);
            assert_eq!(table.get(&probe), map.get(&probe));
            if let Some(v) = table.get_mut(&probe) {
                *v += 1;
                *map.get_mut(&probe).unwrap() += 1;
            }
            assert_eq!(table.len(), map.len());
            most = most.max(map.len());
            assert!(table.slots.len() <= (4 * most).max(FIRST_SLOTS));
        }
        let mut all: Vec<(u64, u64)> = table.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort_unstable();
        assert_eq!(all, map.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        let mut drained = table.drain();
        drained.sort_unstable();
        assert_eq!(drained, map.into_iter().collect::<Vec<_>>());
        assert_eq!(table.len(), 0);
        assert_eq!(table.get(&id), None);
    }
}

//! A map whose entries close once they have been idle longer than a horizon.
//!
//! Why: a journal of a big run holds a million requests, but at any moment only a few operations
//! are still in progress. Checks keep per-key state in an [`IdleMap`] and get each entry back, for
//! a final judgement, once nothing has touched it for `horizon` microseconds. Memory then follows
//! the number of open operations, not the size of the journal.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;

/// Per-key state with a last-activity time; idle keys are handed back by [`IdleMap::expire`].
#[derive(Debug)]
pub(crate) struct IdleMap<K, V> {
    horizon_us: u64,
    map: HashMap<K, Slot<V>>,
    /// Min-heap of (activity time, key); stale pairs (the key was touched again later) are skipped.
    queue: BinaryHeap<Reverse<(u64, K)>>,
}

#[derive(Debug)]
struct Slot<V> {
    last_us: u64,
    value: V,
}

impl<K: Hash + Eq + Ord + Clone, V> IdleMap<K, V> {
    /// An empty map closing keys idle for longer than `horizon_us`.
    pub(crate) fn new(horizon_us: u64) -> Self {
        IdleMap {
            horizon_us,
            map: HashMap::new(),
            queue: BinaryHeap::new(),
        }
    }

    /// The value for `key`, if it is open.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|s| &s.value)
    }

    /// The value for `key` (created by `init` when absent), marked active at `at_us`.
    pub(crate) fn touch(&mut self, key: &K, at_us: u64, init: impl FnOnce() -> V) -> &mut V {
        let slot = match self.map.entry(key.clone()) {
            Entry::Occupied(o) => {
                let slot = o.into_mut();
                if at_us > slot.last_us {
                    slot.last_us = at_us;
                    self.queue.push(Reverse((at_us, key.clone())));
                }
                slot
            }
            Entry::Vacant(v) => {
                self.queue.push(Reverse((at_us, key.clone())));
                v.insert(Slot {
                    last_us: at_us,
                    value: init(),
                })
            }
        };
        &mut slot.value
    }

    /// Removes `key` now, whatever its activity.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key).map(|s| s.value)
    }

    /// Hands every key idle for longer than the horizon at `now_us` to `f`, oldest first.
    pub(crate) fn expire(&mut self, now_us: u64, mut f: impl FnMut(K, V)) {
        while let Some(Reverse((at, _))) = self.queue.peek() {
            if at.saturating_add(self.horizon_us) >= now_us {
                break;
            }
            let Some(Reverse((at, key))) = self.queue.pop() else {
                break;
            };
            let current = self.map.get(&key).map(|s| s.last_us);
            if current == Some(at) {
                if let Some(slot) = self.map.remove(&key) {
                    f(key, slot.value);
                }
            }
        }
    }

    /// Every open key, oldest activity first (ties by key), for the end of the journal.
    pub(crate) fn drain(self) -> Vec<(K, V)> {
        let mut all: Vec<(u64, K, V)> = self
            .map
            .into_iter()
            .map(|(k, s)| (s.last_us, k, s.value))
            .collect();
        all.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        all.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// Number of open keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_close_after_the_horizon_oldest_first() {
        let mut m: IdleMap<String, u32> = IdleMap::new(10);
        *m.touch(&"a".to_string(), 0, || 0) += 1;
        *m.touch(&"b".to_string(), 5, || 0) += 1;
        *m.touch(&"a".to_string(), 8, || 0) += 1;
        let mut closed = Vec::new();
        m.expire(15, |k, v| closed.push((k, v)));
        assert!(
            closed.is_empty(),
            "a was touched at 8, b at 5: both open at 15"
        );
        m.expire(16, |k, v| closed.push((k, v)));
        assert_eq!(closed, vec![("b".to_string(), 1)]);
        m.expire(100, |k, v| closed.push((k, v)));
        assert_eq!(closed, vec![("b".to_string(), 1), ("a".to_string(), 2)]);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn drain_is_ordered_by_activity() {
        let mut m: IdleMap<u32, ()> = IdleMap::new(10);
        m.touch(&3, 1, || ());
        m.touch(&1, 2, || ());
        m.touch(&2, 1, || ());
        let keys: Vec<u32> = m.drain().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![2, 3, 1]);
    }
}

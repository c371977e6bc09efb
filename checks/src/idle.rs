//! A map whose entries close once they have been idle longer than a horizon.
//!
//! Why: a journal of a big run holds a million requests, but at any moment only a few operations
//! are still in progress. Checks keep per-key state in an [`IdleMap`] and get each entry back, for
//! a final judgement, once nothing has touched it for `horizon` microseconds. Memory then follows
//! the number of open keys, not the size of the journal.
//!
//! How: entries are found by a fast 64-bit hash of their key (the key itself is stored once, and
//! compared on every lookup), and a FIFO queue holds one (activity time, hash) per key in the
//! order keys were opened. Journal entries arrive in time order, so the queue is almost sorted:
//! a key whose time at the front is stale (it was touched since) is queued again behind the
//! others. A key touched far ahead of the others (a request that hung for 30 s) can delay the
//! closing of the keys queued behind it, never hasten it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A 64-bit hash of `key`, the same in every run, for checks that keep a hash instead of a copy
/// of a long value (a body fingerprint). Two different values collide with a probability of
/// about n²/2⁶⁵ for n values: negligible for a journal.
pub(crate) fn hash_key<K: Hash + ?Sized>(key: &K) -> u64 {
    slot_hash(key)
}

/// A fast, non-cryptographic hash for finding slots: keys are compared on every lookup, so its
/// quality only affects speed, never correctness.
fn slot_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = Fast(0);
    key.hash(&mut h);
    h.finish()
}

/// FxHash-style word mixing with a final avalanche.
#[derive(Debug, Default)]
struct Fast(u64);

impl Fast {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Fast {
    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64.
        let mut k = self.0;
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// Hasher for keys that are already well-mixed 64-bit hashes.
#[derive(Debug, Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A key as looked up: the stored key type itself, or a borrowed form of it that hashes the same
/// way (so a lookup does not have to build an owned key first).
pub(crate) trait Probe<K>: Hash {
    /// True when `self` names `key`.
    fn is(&self, key: &K) -> bool;
    /// The owned key, stored when the lookup inserts.
    fn to_key(&self) -> K;
}

impl<K: Hash + Eq + Clone> Probe<K> for K {
    fn is(&self, key: &K) -> bool {
        self == key
    }
    fn to_key(&self) -> K {
        self.clone()
    }
}

/// Per-key state with a last-activity time; idle keys are handed back by [`IdleMap::expire`].
#[derive(Debug)]
pub(crate) struct IdleMap<K, V> {
    horizon_us: u64,
    map: HashMap<u64, Slot<K, V>, BuildHasherDefault<PreHashed>>,
    /// (activity time when queued, slot hash), in the order keys were opened or re-queued.
    queue: VecDeque<(u64, u64)>,
}

#[derive(Debug)]
struct Slot<K, V> {
    key: K,
    last_us: u64,
    value: V,
}

impl<K: Hash + Eq + Ord + Clone, V> IdleMap<K, V> {
    /// An empty map closing keys idle for longer than `horizon_us`.
    pub(crate) fn new(horizon_us: u64) -> Self {
        IdleMap {
            horizon_us,
            map: HashMap::default(),
            queue: VecDeque::new(),
        }
    }

    /// The slot hash of `key` and whether it is present. A 64-bit collision (two keys, one hash)
    /// moves the second key to the next free hash.
    fn find(&self, key: &(impl Probe<K> + ?Sized)) -> (u64, bool) {
        let mut h = slot_hash(key);
        loop {
            match self.map.get(&h) {
                Some(slot) if key.is(&slot.key) => return (h, true),
                Some(_) => h = h.wrapping_add(1),
                None => return (h, false),
            }
        }
    }

    /// The value for `key`, if it is open.
    pub(crate) fn get(&self, key: &(impl Probe<K> + ?Sized)) -> Option<&V> {
        match self.find(key) {
            (h, true) => self.map.get(&h).map(|s| &s.value),
            _ => None,
        }
    }

    /// The value for `key` (created by `init` when absent), marked active at `at_us`.
    pub(crate) fn touch(
        &mut self,
        key: &(impl Probe<K> + ?Sized),
        at_us: u64,
        init: impl FnOnce() -> V,
    ) -> &mut V {
        let (h, present) = self.find(key);
        if !present {
            self.queue.push_back((at_us, h));
        }
        let slot = self.map.entry(h).or_insert_with(|| Slot {
            key: key.to_key(),
            last_us: at_us,
            value: init(),
        });
        slot.last_us = slot.last_us.max(at_us);
        &mut slot.value
    }

    /// Like [`IdleMap::touch`], but an entry idle for longer than the horizon at `now_us` (one the
    /// queue has not closed yet) is first removed and returned: the key starts afresh.
    pub(crate) fn touch_fresh(
        &mut self,
        key: &(impl Probe<K> + ?Sized),
        now_us: u64,
        at_us: u64,
        init: impl FnOnce() -> V,
    ) -> (Option<V>, &mut V) {
        let (h, present) = self.find(key);
        let mut stale = None;
        if present
            && self
                .map
                .get(&h)
                .is_some_and(|s| s.last_us.saturating_add(self.horizon_us) < now_us)
        {
            stale = self.map.remove(&h).map(|s| s.value);
        }
        if !present || stale.is_some() {
            self.queue.push_back((at_us, h));
        }
        let slot = self.map.entry(h).or_insert_with(|| Slot {
            key: key.to_key(),
            last_us: at_us,
            value: init(),
        });
        slot.last_us = slot.last_us.max(at_us);
        (stale, &mut slot.value)
    }

    /// Removes `key` now, whatever its activity.
    pub(crate) fn remove(&mut self, key: &(impl Probe<K> + ?Sized)) -> Option<V> {
        match self.find(key) {
            (h, true) => self.map.remove(&h).map(|s| s.value),
            _ => None,
        }
    }

    /// Hands every key idle for longer than the horizon at `now_us` to `f`, oldest first.
    pub(crate) fn expire(&mut self, now_us: u64, mut f: impl FnMut(K, V)) {
        while let Some(&(at, h)) = self.queue.front() {
            if at.saturating_add(self.horizon_us) >= now_us {
                break;
            }
            self.queue.pop_front();
            match self.map.get(&h).map(|s| s.last_us) {
                Some(last) if last == at => {
                    if let Some(slot) = self.map.remove(&h) {
                        f(slot.key, slot.value);
                    }
                }
                // Touched since it was queued: queue it again at its latest activity.
                Some(last) => self.queue.push_back((last, h)),
                // Removed directly: forget it.
                None => {}
            }
        }
    }

    /// Every open key, oldest activity first (ties by key), for the end of the journal.
    pub(crate) fn drain(self) -> Vec<(K, V)> {
        let mut all: Vec<Option<Slot<K, V>>> = self.map.into_values().map(Some).collect();
        // Sort positions, not the (possibly large) slots.
        let mut order: Vec<(u64, usize)> = all
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_ref().map_or(0, |s| s.last_us), i))
            .collect();
        order.sort_unstable_by(|&(ta, a), &(tb, b)| {
            let key = |i: usize| all.get(i).and_then(|s| s.as_ref()).map(|s| &s.key);
            (ta, key(a)).cmp(&(tb, key(b)))
        });
        order
            .into_iter()
            .filter_map(|(_, i)| all.get_mut(i).and_then(Option::take))
            .map(|s| (s.key, s.value))
            .collect()
    }

    /// Number of open keys.
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
        assert_eq!(m.get(&"a".to_string()), Some(&2));
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
    fn removed_and_reopened_keys_close_once() {
        let mut m: IdleMap<u32, u32> = IdleMap::new(10);
        m.touch(&1, 0, || 0);
        assert_eq!(m.remove(&1), Some(0));
        *m.touch(&1, 5, || 7) += 1;
        let mut closed = Vec::new();
        m.expire(100, |k, v| closed.push((k, v)));
        assert_eq!(closed, vec![(1, 8)]);
    }

    #[test]
    fn touch_fresh_restarts_an_idle_key_the_queue_has_not_closed() {
        let mut m: IdleMap<u32, u32> = IdleMap::new(10);
        *m.touch(&1, 0, || 0) += 1;
        let (old, v) = m.touch_fresh(&1, 5, 5, || 0);
        assert_eq!((old, *v), (None, 1));
        let (old, v) = m.touch_fresh(&1, 50, 50, || 0);
        assert_eq!((old, *v), (Some(1), 0));
        let mut closed = Vec::new();
        m.expire(100, |k, v| closed.push((k, v)));
        assert_eq!(closed, vec![(1, 0)]);
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

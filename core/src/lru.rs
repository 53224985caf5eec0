//! A bounded map that forgets its least recently used entry: the one shape
//! of every cache a backend keeps for the process's life (compiled modules,
//! pipelines, prepared plans), so none of them grows without bound.
//!
//! Lookups and insertions are O(capacity) at worst (eviction scans for the
//! oldest use); the caches hold tens to hundreds of entries, each standing
//! for a compilation that costs far more.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// At most `capacity` entries; inserting into a full map evicts the entry
/// used least recently (by [`Lru::get`] or [`Lru::insert`]).
#[derive(Clone, Debug)]
pub struct Lru<K, V> {
    capacity: usize,
    /// Each entry with the tick of its last use.
    entries: HashMap<K, (V, u64)>,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map that holds at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            tick: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`, now the most recently used entry.
    pub fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(value, used)| {
            *used = tick;
            &*value
        })
    }

    /// Whether `key` is held (not counted as a use).
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.contains_key(key)
    }

    /// Inserts or replaces `key`'s value, evicting the least recently used
    /// other entry when the map is full; returns the evicted entry.
    pub fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        self.tick += 1;
        let mut evicted = None;
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                evicted = self.entries.remove(&oldest).map(|(v, _)| (oldest, v));
            }
        }
        self.entries.insert(key, (value, self.tick));
        evicted
    }

    /// Removes `key`, returning its value.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.remove(key).map(|(v, _)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let mut lru = Lru::new(2);
        assert_eq!(lru.insert("a", 1), None);
        assert_eq!(lru.insert("b", 2), None);
        assert_eq!(lru.get("a"), Some(&1)); // `b` is now the oldest
        assert_eq!(lru.insert("c", 3), Some(("b", 2)));
        assert_eq!(lru.len(), 2);
        assert!(lru.contains("a") && lru.contains("c") && !lru.contains("b"));
        // Replacing a held key evicts nothing.
        assert_eq!(lru.insert("a", 10), None);
        assert_eq!(lru.get("a"), Some(&10));
        assert_eq!(lru.insert("d", 4), Some(("c", 3)));
        assert_eq!(lru.remove("a"), Some(10));
        assert_eq!(lru.len(), 1);
    }

    #[test]
    fn a_map_never_holds_more_than_its_capacity() {
        let mut lru = Lru::new(8);
        for k in 0..100 {
            lru.insert(k, k * 2);
            assert!(lru.len() <= 8);
        }
        assert_eq!(lru.len(), 8);
        // The 8 most recent survive.
        assert!((92..100).all(|k| lru.contains(&k)));
        assert_eq!(Lru::<u32, u32>::new(0).capacity(), 1);
    }
}

//! The one seeded PRNG of the project (splitmix64): generated inputs, random
//! programs and interpreter schedules are pure functions of their seeds, the
//! same on every platform and in every version.

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, statistically fine for
/// test data and schedules; not for cryptography.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// A generator for one stream, keyed by a seed and names (e.g. the case
    /// and the operand), so that streams are independent of each other.
    pub fn for_stream(seed: u64, names: &[&str]) -> Self {
        // FNV-1a over the names, each terminated by 0xff so that ["ab", "c"]
        // and ["a", "bc"] differ, mixed into the seed.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for name in names {
            for byte in name.bytes().chain(std::iter::once(0xff)) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
        let mut rng = Rng::new(seed ^ hash);
        rng.next_u64();
        rng
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The high 32 bits of the next output.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, 1)` with 24 random bits.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }

    /// Uniform in `[0, n)`; `n > 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: the bias is below n / 2^64, irrelevant here.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[lo, hi]` (inclusive; `lo <= hi`).
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo) + 1) as u32
    }

    /// Uniform in `[lo, hi]` (inclusive; `lo <= hi`).
    pub fn range_i64(&mut self, lo: i64, hi: i64) -> i64 {
        let span = hi.wrapping_sub(lo) as u64;
        if span == u64::MAX {
            return self.next_u64() as i64;
        }
        lo.wrapping_add(self.below(span + 1) as i64)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < u64::from(percent)
    }

    /// A uniformly chosen element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs of Vigna's reference splitmix64 seeded with 0.
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn streams_depend_on_the_seed_and_every_name() {
        let first = |seed, names: &[&str]| Rng::for_stream(seed, names).next_u64();
        let a = first(1, &["case", "x"]);
        assert_eq!(a, first(1, &["case", "x"]));
        assert_ne!(a, first(2, &["case", "x"]));
        assert_ne!(a, first(1, &["case", "y"]));
        assert_ne!(a, first(1, &["x"]));
        assert_ne!(first(1, &["ab", "c"]), first(1, &["a", "bc"]));
    }

    #[test]
    fn ranges_stay_inside_their_bounds() {
        let mut rng = Rng::new(7);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            let v = rng.range_i64(-3, 3);
            assert!((-3..=3).contains(&v), "{v}");
            seen[(v + 3) as usize] = true;
            assert!((0.0..1.0).contains(&rng.next_f64()));
            assert!((0.0..1.0).contains(&rng.unit_f32()));
            assert!((3..=5).contains(&rng.range(3, 5)));
            assert!(rng.below(10) < 10);
        }
        assert_eq!(seen, [true; 7]);
        assert_eq!(rng.range_i64(5, 5), 5);
        assert_eq!(rng.range(9, 9), 9);
        // The full i64 range does not overflow.
        rng.range_i64(i64::MIN, i64::MAX);
    }

    #[test]
    fn chance_pick_and_shuffle() {
        let mut rng = Rng::new(3);
        assert!((0..100).all(|_| !rng.chance(0)));
        assert!((0..100).all(|_| rng.chance(100)));
        let items = [1, 2, 3];
        assert!((0..100).all(|_| items.contains(rng.pick(&items))));
        let mut order: Vec<u32> = (0..50).collect();
        rng.shuffle(&mut order);
        assert_ne!(order, (0..50).collect::<Vec<_>>());
        order.sort_unstable();
        assert_eq!(order, (0..50).collect::<Vec<_>>());
    }
}

//! Seeded randomness that never changes between versions or platforms.
//!
//! Plans and augmentations must be reproducible from a seed forever (a resumed job on a
//! new nostall build must see the same order), so nostall carries its own small generator
//! instead of depending on a crate whose stream might change: SplitMix64 to derive
//! independent streams from (seed, epoch, sample id), xoshiro256** to draw from them.

/// Mixes a 64-bit value: the SplitMix64 finaliser. Good avalanche, cheap, stable.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Derives one stream key from several integers (e.g. seed, epoch, sample id, purpose).
pub fn derive(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x6E6F_7374_616C_6C00, |acc, &p| mix64(acc ^ mix64(p)))
}

/// A stable 64-bit digest of `text` (FNV-1a): the same on every platform and version, for
/// identities that are saved or compared across processes.
pub fn digest_text(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// xoshiro256**: a small, fast generator with a 256-bit state.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose whole stream is fixed by `key` (use [`derive()`] to build keys).
    pub fn new(key: u64) -> Rng {
        let mut x = key;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            mix64(x)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// A generator of its own for `part` (e.g. one operator of a sample's pipeline),
    /// fixed by this one's state and `part`; this one does not move.
    pub fn fork(&self, part: u64) -> Rng {
        let [a, b, c, d] = self.s;
        Rng::new(derive(&[a, b, c, d, part]))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform float in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform float in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// A standard normal draw (Box–Muller, one of the pair).
    pub fn normal(&mut self) -> f64 {
        let radius = (-2.0 * (1.0 - self.next_f64()).ln()).sqrt();
        radius * (std::f64::consts::TAU * self.next_f64()).cos()
    }

    /// A draw from Gamma(`alpha`, 1), `alpha` > 0: Marsaglia and Tsang's method (for
    /// `alpha` < 1, boosted by one and scaled by `u^(1/alpha)`).
    pub fn gamma(&mut self, alpha: f64) -> f64 {
        if alpha < 1.0 {
            let u = 1.0 - self.next_f64();
            return self.gamma(alpha + 1.0) * u.powf(1.0 / alpha);
        }
        let d = alpha - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = 1.0 - self.next_f64();
            if u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d * v;
            }
        }
    }

    /// A draw of `n` weights from Dirichlet(`alpha`, …, `alpha`), `n` > 0: Gamma(`alpha`)
    /// draws over their sum (so with `n` = 2, the first is a Beta(`alpha`, `alpha`) draw).
    /// Where every Gamma draw underflows (a tiny `alpha`, whose mass is at the corners),
    /// one corner, drawn uniformly.
    pub fn dirichlet(&mut self, alpha: f64, n: usize) -> Vec<f64> {
        let gammas: Vec<f64> = (0..n).map(|_| self.gamma(alpha)).collect();
        let sum: f64 = gammas.iter().sum();
        if sum == 0.0 {
            let mut corner = vec![0.0; n];
            corner[n - 1 - self.below(n as u64) as usize] = 1.0;
            return corner;
        }
        gammas.into_iter().map(|g| g / sum).collect()
    }

    /// A uniform integer in [0, n), without modulo bias (Lemire's method). `n` must be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Shuffles `items` in place (Fisher–Yates).
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
    fn stream_is_fixed_forever() {
        // Golden values: if these change, every saved plan and resume position breaks.
        let mut r = Rng::new(derive(&[0, 1, 2]));
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                7471789465931028037,
                15334843408348958977,
                5733992067547057176
            ]
        );
        assert_ne!(derive(&[0, 1, 2]), derive(&[0, 2, 1]));
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut r = Rng::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..1000).collect();
        Rng::new(3).shuffle(&mut v);
        assert_ne!(v, (0..1000).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }
}

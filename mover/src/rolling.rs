//! rsync's rolling weak checksum.
//!
//! `a` is the sum of the bytes in the window and `b` the sum of the running
//! values of `a`; both wrap at 16 bits. Sliding the window by one byte is O(1),
//! which is what lets the sender find matching blocks at every byte offset.

/// The weak checksum of a window, updatable in place as the window slides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rolling {
    a: u32,
    b: u32,
    len: u32,
}

impl Rolling {
    /// The checksum of `window`.
    ///
    /// Computed 32 bytes at a time in independent lanes so the compiler can
    /// vectorize it. With `i = 32m + j`, `b = n·a − Σ i·xᵢ`; per lane `j`,
    /// `acc` sums the bytes and `wacc` sums `acc` before each chunk, which
    /// gives `Σₘ m·x_{m,j} = (K−1)·acc_j − wacc_j` for `K` chunks. All
    /// arithmetic wraps mod 2³², like the definition.
    pub fn new(window: &[u8]) -> Rolling {
        const W: usize = 32;
        let n = window.len() as u32;
        let (chunks, rest) = window.as_chunks::<W>();
        let mut acc = [0u32; W];
        let mut wacc = [0u32; W];
        for chunk in chunks {
            for j in 0..W {
                wacc[j] = wacc[j].wrapping_add(acc[j]);
                acc[j] = acc[j].wrapping_add(chunk[j] as u32);
            }
        }
        let k1 = (chunks.len() as u32).wrapping_sub(1);
        let mut a: u32 = 0;
        let mut ix: u32 = 0; // Σ i·x_i
        for j in 0..W {
            a = a.wrapping_add(acc[j]);
            let m_weighted = k1.wrapping_mul(acc[j]).wrapping_sub(wacc[j]);
            ix = ix
                .wrapping_add((W as u32).wrapping_mul(m_weighted))
                .wrapping_add((j as u32).wrapping_mul(acc[j]));
        }
        let base = (chunks.len() * W) as u32;
        for (j, &x) in rest.iter().enumerate() {
            a = a.wrapping_add(x as u32);
            ix = ix.wrapping_add(base.wrapping_add(j as u32).wrapping_mul(x as u32));
        }
        Rolling {
            a,
            b: n.wrapping_mul(a).wrapping_sub(ix),
            len: n,
        }
    }

    /// Slides the window one byte: `old` leaves at the front, `new` enters at the back.
    #[inline]
    pub fn roll(&mut self, old: u8, new: u8) {
        self.a = self.a.wrapping_sub(old as u32).wrapping_add(new as u32);
        self.b = self
            .b
            .wrapping_sub(self.len.wrapping_mul(old as u32))
            .wrapping_add(self.a);
    }

    /// Shrinks the window from the front by one byte (at the end of a file).
    #[inline]
    pub fn roll_out(&mut self, old: u8) {
        self.a = self.a.wrapping_sub(old as u32);
        self.b = self.b.wrapping_sub(self.len.wrapping_mul(old as u32));
        self.len -= 1;
    }

    /// The 32-bit digest: low half `a`, high half `b`.
    #[inline]
    pub fn digest(&self) -> u32 {
        (self.a & 0xffff) | (self.b << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition, byte by byte.
    fn reference(window: &[u8]) -> u32 {
        let (mut a, mut b) = (0u32, 0u32);
        let n = window.len() as u32;
        for (i, &x) in window.iter().enumerate() {
            a = a.wrapping_add(x as u32);
            b = b.wrapping_add((n - i as u32).wrapping_mul(x as u32));
        }
        (a & 0xffff) | (b << 16)
    }

    proptest! {
        #[test]
        fn vectorized_equals_definition(data in proptest::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert_eq!(Rolling::new(&data).digest(), reference(&data));
        }

        #[test]
        fn rolling_equals_fresh(data in proptest::collection::vec(any::<u8>(), 2..600), w in 1usize..64) {
            let w = w.min(data.len() - 1);
            let mut r = Rolling::new(&data[..w]);
            for i in 0..data.len() - w {
                r.roll(data[i], data[i + w]);
                prop_assert_eq!(r.digest(), Rolling::new(&data[i + 1..i + 1 + w]).digest());
            }
        }

        #[test]
        fn roll_out_equals_fresh(data in proptest::collection::vec(any::<u8>(), 1..100)) {
            let mut r = Rolling::new(&data);
            for i in 0..data.len() - 1 {
                r.roll_out(data[i]);
                prop_assert_eq!(r.digest(), Rolling::new(&data[i + 1..]).digest());
            }
        }
    }
}

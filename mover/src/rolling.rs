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
    pub fn new(window: &[u8]) -> Rolling {
        let mut a: u32 = 0;
        let mut b: u32 = 0;
        let n = window.len() as u32;
        for (i, &x) in window.iter().enumerate() {
            a = a.wrapping_add(x as u32);
            b = b.wrapping_add((n - i as u32).wrapping_mul(x as u32));
        }
        Rolling { a, b, len: n }
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

    proptest! {
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

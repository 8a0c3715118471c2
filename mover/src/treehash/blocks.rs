//! The BLAKE3 of an input cut in blocks of one power-of-two length, from
//! each block's chaining value at its offset: what a block session's two
//! sides compute from the hashes they need anyway for their sums, so that
//! the whole device's hash costs no second read.

use blake3::hazmat::{ChainingValue, HasherExt};

use super::{push, root, Head, Piece, CHUNK};

/// A block's chaining value at `offset` (a multiple of its length, itself a
/// power of two of at least one chunk; the input's last block may be
/// shorter). Not the hash of an input of one block: see [`BlockRoot`].
pub fn block_cv(offset: u64, data: &[u8]) -> ChainingValue {
    let mut h = blake3::Hasher::new();
    h.set_input_offset(offset);
    h.update(data);
    h.finalize_non_root()
}

/// The blocks of an input hashed so far, from offset 0, as complete
/// subtrees (a [`Head`]).
#[derive(Clone, Debug)]
pub struct BlockRoot {
    head: Head,
}

impl BlockRoot {
    pub fn new() -> BlockRoot {
        BlockRoot {
            head: Head::empty(),
        }
    }

    /// Goes on after a head hashed earlier (a checkpoint's).
    pub fn from_head(head: Head) -> BlockRoot {
        BlockRoot { head }
    }

    /// Bytes covered so far.
    pub fn len(&self) -> u64 {
        self.head.len
    }

    pub fn is_empty(&self) -> bool {
        self.head.len == 0
    }

    /// What is covered so far, to store or send.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// Appends the next block, of `len` bytes: a power-of-two number of
    /// chunks, at an offset that is a multiple of it. Blocks of one input
    /// all have the same length, so this always holds for every block but
    /// the last, which goes to [`BlockRoot::finish`].
    pub fn push(&mut self, len: u64, cv: ChainingValue) {
        debug_assert!(len >= CHUNK && (len / CHUNK).is_power_of_two());
        debug_assert!(self.head.len.is_multiple_of(len));
        let start = self.head.len;
        push(&mut self.head.pieces, Piece { start, len, cv });
        self.head.len += len;
    }

    /// The hash of the whole input: the blocks pushed, then a last one of
    /// `last_len` bytes (no longer than the others) whose chaining value is
    /// `last_cv`. `None` when nothing was pushed: an input of one block has
    /// a root that no chaining value gives, so its bytes are hashed whole.
    pub fn finish(&self, last_len: u64, last_cv: ChainingValue) -> Option<blake3::Hash> {
        if self.head.pieces.is_empty() || last_len == 0 {
            return None;
        }
        let mut pieces = self.head.pieces.clone();
        pieces.push(Piece {
            start: self.head.len,
            len: last_len,
            cv: last_cv,
        });
        root(self.head.len + last_len, &pieces)
    }
}

impl Default for BlockRoot {
    fn default() -> Self {
        BlockRoot::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// The root of `input` in blocks of `block`, as both sides compute it.
    fn by_blocks(input: &[u8], block: usize) -> Option<blake3::Hash> {
        let mut root = BlockRoot::new();
        let mut at = 0;
        while input.len() - at > block {
            root.push(block as u64, block_cv(at as u64, &input[at..at + block]));
            at += block;
        }
        root.finish((input.len() - at) as u64, block_cv(at as u64, &input[at..]))
    }

    #[test]
    fn the_root_of_blocks_is_the_hash_of_the_input() {
        let block = 16 << 10;
        let mut sizes = vec![block + 1, 2 * block, 3 * block + 1000, 5 * block - 1];
        for k in 1..7 {
            let n = (1usize << k) * block;
            sizes.extend([n - 1, n, n + 1, n + 1024, n + block - 1]);
        }
        for size in sizes {
            let input = data(size);
            assert_eq!(
                by_blocks(&input, block),
                Some(blake3::hash(&input)),
                "{size} bytes in blocks of {block}"
            );
        }
        // A chunk-sized block, and a last block shorter than a chunk.
        let input = data(5 * 1024 + 17);
        assert_eq!(by_blocks(&input, 1024), Some(blake3::hash(&input)));
    }

    #[test]
    fn a_root_goes_on_from_a_stored_head() {
        let block = 16 << 10;
        let input = data(11 * block + 99);
        let mut first = BlockRoot::new();
        for i in 0..6 {
            first.push(
                block as u64,
                block_cv((i * block) as u64, &input[i * block..(i + 1) * block]),
            );
        }
        let head = Head::from_pieces(&first.head().pieces()).expect("a head");
        let mut rest = BlockRoot::from_head(head);
        for i in 6..11 {
            rest.push(
                block as u64,
                block_cv((i * block) as u64, &input[i * block..(i + 1) * block]),
            );
        }
        let last = &input[11 * block..];
        assert_eq!(
            rest.finish(last.len() as u64, block_cv((11 * block) as u64, last)),
            Some(blake3::hash(&input))
        );
    }

    #[test]
    fn one_block_has_no_root_from_chaining_values() {
        let input = data(1000);
        assert_eq!(by_blocks(&input, 16 << 10), None);
    }
}

//! Seed inputs for `delta_applier`, written by `seed.sh` through the target.

use super::*;

/// Writes inputs in the layout `Input::arbitrary` reads.
struct Enc(Vec<u8>);

impl Enc {
    #[allow(clippy::too_many_arguments)]
    fn new(
        mode: u8,
        flags: u8,
        basis_len: u32,
        shrink_to: u32,
        prefix_len: u16,
        limit: u32,
        seed: &[u8],
    ) -> Enc {
        let mut v = vec![mode, flags];
        v.extend_from_slice(&basis_len.to_le_bytes());
        v.extend_from_slice(&shrink_to.to_le_bytes());
        v.extend_from_slice(&prefix_len.to_le_bytes());
        v.extend_from_slice(&limit.to_le_bytes());
        v.push(seed.len() as u8);
        v.extend_from_slice(seed);
        Enc(v)
    }

    fn op(mut self, op: FuzzOp) -> Enc {
        let v = &mut self.0;
        match op {
            FuzzOp::Copy { block, count } => {
                v.push(0);
                v.extend_from_slice(&block.to_le_bytes());
                v.extend_from_slice(&count.to_le_bytes());
            }
            FuzzOp::Literal(d) => {
                v.push(2);
                v.extend_from_slice(&(d.len() as u16).to_le_bytes());
                v.extend_from_slice(&d);
            }
            FuzzOp::Fill { len, byte } => {
                v.push(3);
                v.extend_from_slice(&len.to_le_bytes());
                v.push(byte);
            }
            FuzzOp::Zeros(n) => {
                v.push(4);
                v.extend_from_slice(&n.to_le_bytes());
            }
            FuzzOp::Prefix => v.push(6),
        }
        self
    }

    fn piece(mut self, p: Piece) -> Enc {
        let v = &mut self.0;
        match p {
            Piece::Basis { start, len } => {
                v.push(0);
                v.extend_from_slice(&start.to_le_bytes());
                v.extend_from_slice(&len.to_le_bytes());
            }
            Piece::Bytes(b) => {
                v.push(1);
                v.push(b.len() as u8);
                v.extend_from_slice(&b);
            }
            Piece::Zeros(n) => {
                v.push(2);
                v.extend_from_slice(&n.to_le_bytes());
            }
        }
        self
    }
}

fn copy(block: u32, count: u32) -> FuzzOp {
    FuzzOp::Copy { block, count }
}

fn lit(s: &[u8]) -> FuzzOp {
    FuzzOp::Literal(s.to_vec())
}

pub fn all() -> Vec<(String, Vec<u8>)> {
    let seed = b"volmig seed: the quick brown fox jumps over the lazy dog".as_slice();
    let mut out: Vec<(String, Enc)> = Vec::new();
    let modes = [(0u8, "dense"), (1, "sparse"), (2, "inplace"), (3, "resume")];
    for (mode, name) in modes {
        // Ops that rebuild a 2900-byte basis, moved and edited.
        let e = Enc::new(mode, 1, 2900, 0, 1000, 20_000, seed)
            .op(copy(1, 2))
            .op(lit(b"new bytes"))
            .op(FuzzOp::Zeros(5000))
            .op(FuzzOp::Prefix)
            .op(copy(0, 1))
            .op(FuzzOp::Fill { len: 8192, byte: 0 })
            .op(copy(4, 1))
            .op(FuzzOp::Prefix);
        out.push((format!("{name}-ops"), e));
        // The same basis, the target built from its pieces by mover's delta.
        let e = Enc::new(mode, 3, 2900, 0, 1000, 0, seed)
            .piece(Piece::Basis {
                start: 700,
                len: 1400,
            })
            .piece(Piece::Bytes(b"inserted".to_vec()))
            .piece(Piece::Zeros(9000))
            .piece(Piece::Basis {
                start: 0,
                len: 2900,
            });
        out.push((format!("{name}-delta"), e));
    }
    // A copy longer than LITERAL_CHUNK (several reads), in place and not.
    for (mode, name) in [(0u8, "dense"), (2, "inplace")] {
        let e = Enc::new(mode, 1 | 16 | 32, 300_000, 0, 0, 400_000, seed)
            .op(lit(b"head"))
            .op(copy(0, 429));
        out.push((format!("{name}-long-copy"), e));
    }
    // Errors: no basis, a block out of range, too long, a shrunk basis.
    out.push((
        "no-basis".into(),
        Enc::new(0, 0, 0, 0, 0, 100, b"").op(copy(0, 1)),
    ));
    out.push((
        "out-of-range".into(),
        Enc::new(0, 1, 1500, 0, 0, 100_000, seed).op(copy(2, 2)),
    ));
    out.push((
        "too-long".into(),
        Enc::new(1, 1, 1500, 0, 0, 100, seed)
            .op(lit(b"0123456789"))
            .op(FuzzOp::Zeros(u64::MAX)),
    ));
    out.push((
        "shrunk".into(),
        Enc::new(2, 5, 3000, 1000, 0, 100_000, seed).op(copy(0, 4)),
    ));
    out.push((
        "repeat".into(),
        Enc::new(0, 1 | 2 | 8, 7000, 0, 0, 0, b"abc").piece(Piece::Basis {
            start: 3,
            len: 5000,
        }),
    ));
    let failing = ["no-basis", "out-of-range", "too-long", "shrunk"];
    out.into_iter()
        .map(|(name, e)| {
            // The layout must read back as written (or the seeds are junk),
            // and the seed must do what its name says.
            let input = Input::arbitrary_take_rest(Unstructured::new(&e.0)).expect("decodes");
            assert!(
                !matches!(&input.body, Body::Ops(o) if o.is_empty()),
                "{name}: no ops"
            );
            assert!(
                !matches!(&input.body, Body::Delta(p) if p.is_empty()),
                "{name}: no pieces"
            );
            let ok = run(input);
            assert_eq!(ok, !failing.contains(&name.as_str()), "{name}: outcome");
            (name, e.0)
        })
        .collect()
}

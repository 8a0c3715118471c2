//! Which queued claims start copying now: `--parallel` claims at once, and
//! at most `--per-node` mover pods on one node. Pure.
//!
//! A claim's movers are either pinned (a ReadWriteOnce source in use pins
//! its sender to the app's node; `--to-node` or a node-local volume pins
//! the receiver) or placed by the scheduler. A pinned mover counts on its
//! node before it exists. A mover the scheduler has not placed yet may
//! land anywhere: a claim starts only if its movers fit even were every
//! unplaced mover to land on the busiest node. Unplaced movers also get
//! the nodes already full to avoid (required `NotIn` affinity). A claim
//! that does not fit waits while claims behind it may go first.

use std::collections::BTreeMap;

/// `--parallel` and `--per-node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub claims: u32,
    pub per_node: u32,
}

/// A claim waiting to copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub key: u32,
    /// The nodes its movers are pinned to (one entry per mover: a sender
    /// and a receiver pinned to one node count twice).
    pub pinned: Vec<String>,
    /// How many of its movers the scheduler places.
    pub unpinned: u32,
}

/// What runs now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Load {
    /// Claims copying.
    pub running: u32,
    /// Mover pods (existing, or pinned and about to) per node.
    pub per_node: BTreeMap<String, u32>,
    /// Movers the scheduler has not placed yet (or that are about to be
    /// created): they may land on any node.
    pub unplaced: u32,
}

/// A claim let in, and the nodes its unpinned movers must avoid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub key: u32,
    pub avoid: Vec<String>,
}

/// The claims of `queue` (in order) that may start now, given `load`.
pub fn admit(queue: &[Candidate], load: &Load, limits: Limits) -> Vec<Admission> {
    let mut running = load.running;
    let mut per_node = load.per_node.clone();
    let mut unplaced = load.unplaced;
    let mut admitted = Vec::new();
    for c in queue {
        if running >= limits.claims.max(1) {
            break;
        }
        let mut wanted: BTreeMap<&str, u32> = BTreeMap::new();
        for node in &c.pinned {
            *wanted.entry(node.as_str()).or_default() += 1;
        }
        // The worst a node can get: what it has, what this claim pins
        // there, and every unplaced mover (this claim's too) landing there.
        let floating = unplaced + c.unpinned;
        let busiest = per_node
            .iter()
            .map(|(node, n)| n + wanted.get(node.as_str()).copied().unwrap_or(0))
            .chain(wanted.values().copied())
            .max()
            .unwrap_or(0);
        if busiest + floating > limits.per_node {
            continue;
        }
        for (node, n) in wanted {
            *per_node.entry(node.to_string()).or_default() += n;
        }
        unplaced = floating;
        let avoid = match c.unpinned {
            0 => Vec::new(),
            _ => full_nodes(&per_node, limits.per_node),
        };
        running += 1;
        admitted.push(Admission { key: c.key, avoid });
    }
    admitted
}

/// The nodes with no room left for a mover.
pub fn full_nodes(per_node: &BTreeMap<String, u32>, limit: u32) -> Vec<String> {
    per_node
        .iter()
        .filter(|(_, n)| **n >= limit)
        .map(|(node, _)| node.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pinned(key: u32, nodes: &[&str]) -> Candidate {
        Candidate {
            key,
            pinned: nodes.iter().map(|n| n.to_string()).collect(),
            unpinned: 2 - nodes.len() as u32,
        }
    }

    fn free(key: u32) -> Candidate {
        pinned(key, &[])
    }

    fn keys(a: &[Admission]) -> Vec<u32> {
        a.iter().map(|a| a.key).collect()
    }

    #[test]
    fn parallel_caps_the_claims_running() {
        let queue = [
            pinned(0, &["a", "a"]),
            pinned(1, &["b", "b"]),
            pinned(2, &["c", "c"]),
        ];
        let limits = Limits {
            claims: 2,
            per_node: 4,
        };
        assert_eq!(keys(&admit(&queue, &Load::default(), limits)), [0, 1]);
        let busy = Load {
            running: 1,
            ..Load::default()
        };
        assert_eq!(keys(&admit(&queue, &busy, limits)), [0]);
    }

    #[test]
    fn a_claim_that_would_overfill_a_node_waits_and_later_ones_go_first() {
        let queue = [
            pinned(0, &["a", "a"]),
            pinned(1, &["a", "b"]),
            pinned(2, &["b", "c"]),
        ];
        let limits = Limits {
            claims: 8,
            per_node: 2,
        };
        assert_eq!(keys(&admit(&queue, &Load::default(), limits)), [0, 2]);
    }

    #[test]
    fn unplaced_movers_count_on_the_busiest_node_and_full_nodes_are_avoided() {
        let load = Load {
            running: 1,
            per_node: BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]),
            unplaced: 0,
        };
        let limits = Limits {
            claims: 8,
            per_node: 4,
        };
        // 2 on a, plus 2 unplaced of claim 3: 4. Claim 4's would make 6.
        let got = admit(&[free(3), free(4)], &load, limits);
        assert_eq!(
            got,
            [Admission {
                key: 3,
                avoid: Vec::new()
            }]
        );
        let roomy = Limits {
            claims: 8,
            per_node: 16,
        };
        assert_eq!(keys(&admit(&[free(3), free(4)], &load, roomy)), [3, 4]);
        let full = Limits {
            claims: 8,
            per_node: 2,
        };
        assert!(admit(&[free(3)], &load, full).is_empty());
    }

    proptest! {
        /// Never more than `claims` running, and no node over `per_node`
        /// even if every unplaced mover lands on it.
        #[test]
        fn limits_hold_in_the_worst_case(
            claims in 1u32..6,
            per_node in 2u32..6,
            unplaced in 0u32..3,
            queue in proptest::collection::vec(proptest::collection::vec(0usize..3, 0..3), 0..10),
        ) {
            let nodes = ["a", "b", "c"];
            let queue: Vec<Candidate> = queue
                .into_iter()
                .enumerate()
                .map(|(i, pins)| {
                    let pins: Vec<&str> = pins.iter().take(2).map(|n| nodes[*n]).collect();
                    pinned(i as u32, &pins)
                })
                .collect();
            let limits = Limits { claims, per_node };
            let load = Load { unplaced, ..Load::default() };
            let got = admit(&queue, &load, limits);
            prop_assert!(got.len() as u32 <= claims);
            let mut per: BTreeMap<&str, u32> = BTreeMap::new();
            let mut floating = unplaced;
            for a in &got {
                let c = queue.iter().find(|c| c.key == a.key).expect("admitted from the queue");
                for n in &c.pinned {
                    *per.entry(n.as_str()).or_default() += 1;
                }
                floating += c.unpinned;
            }
            let busiest = per.values().copied().max().unwrap_or(0);
            prop_assert!(busiest + floating <= per_node.max(unplaced), "{got:?}");
        }
    }
}

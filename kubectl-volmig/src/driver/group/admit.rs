//! Which queued claims start copying now: `--parallel` claims at once, and
//! at most `--per-node` mover pods on one node. Pure.
//!
//! A claim's movers are either pinned (a ReadWriteOnce source in use pins
//! its sender to the app's node; `--to-node` or a node-local volume pins
//! the receiver) or placed by the scheduler. A pinned mover counts on its
//! node before it exists, and a claim that would put a node over the
//! limit waits while claims behind it may go first. Unpinned movers get
//! the full nodes to avoid (required `NotIn` affinity); near the limit,
//! while one of them has no node yet, no other unpinned claim starts, so
//! two cannot both take a node's last free places.

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
    /// Whether a mover of it is left to the scheduler.
    pub unpinned: bool,
}

/// What runs now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Load {
    /// Claims copying.
    pub running: u32,
    /// Mover pods (existing, or pinned and about to) per node.
    pub per_node: BTreeMap<String, u32>,
    /// A scheduler-placed mover has no node yet.
    pub placing: bool,
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
    let mut placing = load.placing;
    let mut admitted = Vec::new();
    for c in queue {
        if running >= limits.claims.max(1) {
            break;
        }
        let mut wanted: BTreeMap<&str, u32> = BTreeMap::new();
        for node in &c.pinned {
            *wanted.entry(node.as_str()).or_default() += 1;
        }
        let fits = wanted
            .iter()
            .all(|(node, n)| per_node.get(*node).copied().unwrap_or(0) + n <= limits.per_node);
        // Two claims placing at once could both take a node's last
        // places (a claim has two movers): only a worry near the limit.
        let busiest = per_node.values().copied().max().unwrap_or(0);
        let tight = busiest + 4 > limits.per_node;
        if !fits || (c.unpinned && placing && tight) {
            continue;
        }
        for (node, n) in wanted {
            *per_node.entry(node.to_string()).or_default() += n;
        }
        let avoid = match c.unpinned {
            true => full_nodes(&per_node, limits.per_node),
            false => Vec::new(),
        };
        placing |= c.unpinned;
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
            unpinned: false,
        }
    }

    fn free(key: u32) -> Candidate {
        Candidate {
            key,
            pinned: Vec::new(),
            unpinned: true,
        }
    }

    fn keys(a: &[Admission]) -> Vec<u32> {
        a.iter().map(|a| a.key).collect()
    }

    #[test]
    fn parallel_caps_the_claims_running() {
        let queue = [pinned(0, &["a"]), pinned(1, &["b"]), pinned(2, &["c"])];
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
        let load = Load::default();
        assert_eq!(keys(&admit(&queue, &load, limits)), [0, 2]);
    }

    #[test]
    fn unpinned_movers_avoid_full_nodes_one_placing_at_a_time() {
        let load = Load {
            running: 1,
            per_node: BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]),
            placing: false,
        };
        let limits = Limits {
            claims: 8,
            per_node: 2,
        };
        let got = admit(&[free(3), free(4)], &load, limits);
        assert_eq!(
            got,
            [Admission {
                key: 3,
                avoid: vec!["a".into()]
            }]
        );
        let placing = Load {
            placing: true,
            ..load
        };
        assert!(admit(&[free(3)], &placing, limits).is_empty());
        let roomy = Limits {
            claims: 8,
            per_node: 16,
        };
        assert_eq!(keys(&admit(&[free(3), free(4)], &placing, roomy)), [3, 4]);
    }

    proptest! {
        /// Never more than `claims` running, never a pinned node over
        /// `per_node`, and a claim that fits on an empty cluster is never
        /// passed over when nothing runs.
        #[test]
        fn limits_hold(
            claims in 1u32..6,
            per_node in 1u32..4,
            queue in proptest::collection::vec(
                (proptest::collection::vec(0usize..3, 0..3), any::<bool>()), 0..10),
        ) {
            let nodes = ["a", "b", "c"];
            let queue: Vec<Candidate> = queue
                .into_iter()
                .enumerate()
                .map(|(i, (pins, unpinned))| Candidate {
                    key: i as u32,
                    pinned: pins.iter().map(|n| nodes[*n].to_string()).collect(),
                    unpinned: unpinned || pins.is_empty(),
                })
                .collect();
            let limits = Limits { claims, per_node };
            let got = admit(&queue, &Load::default(), limits);
            prop_assert!(got.len() as u32 <= claims);
            let mut per: BTreeMap<&str, u32> = BTreeMap::new();
            for a in &got {
                let c = queue.iter().find(|c| c.key == a.key).expect("admitted from the queue");
                for n in &c.pinned {
                    *per.entry(n.as_str()).or_default() += 1;
                }
            }
            prop_assert!(per.values().all(|n| *n <= per_node));
            let first_fits = queue.first().is_some_and(|c| {
                let mut w: BTreeMap<&str, u32> = BTreeMap::new();
                c.pinned.iter().for_each(|n| *w.entry(n.as_str()).or_default() += 1);
                w.values().all(|n| *n <= per_node)
            });
            if first_fits {
                prop_assert_eq!(got.first().map(|a| a.key), Some(0));
            }
        }
    }
}

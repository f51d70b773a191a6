//! Rendezvous (highest-random-weight) hashing: which live node a key belongs to.
//!
//! Every process must reach the same answer from the same inputs, whatever its Rust version
//! or platform, so the weight is SHA-256 of `key`, a NUL byte and the node id, read as a
//! big-endian `u64` — never `std`'s randomly seeded hasher. Ties (practically impossible)
//! go to the smaller node id, so the answer never depends on the order of `nodes`.
//!
//! Removing a node moves only the keys it held: every other key keeps its highest weight.

use orbit_store::NodeRow;
use sha2::{Digest, Sha256};

/// The weight of `node_id` for `key`: stable across processes, platforms and releases.
#[must_use]
pub fn weight(key: &str, node_id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    h.update(node_id.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The node `key` belongs to: the one with the highest [`weight`]; `None` when `nodes` is
/// empty.
#[must_use]
pub fn pick<'a>(key: &str, nodes: &'a [NodeRow]) -> Option<&'a NodeRow> {
    nodes.iter().max_by(|a, b| {
        weight(key, &a.node_id)
            .cmp(&weight(key, &b.node_id))
            // Equal weights: the smaller node id wins (so it compares as greater here).
            .then_with(|| b.node_id.cmp(&a.node_id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn node(id: &str) -> NodeRow {
        NodeRow {
            node_id: id.to_string(),
            service: "owner".into(),
            incarnation: "1".into(),
            addr: Some(format!("{id}:7234")),
            heartbeat_at_ms: 0,
            started_at_ms: 0,
            sessions: None,
        }
    }

    fn nodes(ids: &[&str]) -> Vec<NodeRow> {
        ids.iter().map(|id| node(id)).collect()
    }

    #[test]
    fn the_weight_is_a_fixed_function_of_its_inputs() {
        // Pinned values: a change of hash (or of how key and node are joined) would move
        // every execution of a running cluster to another owner, so it must show up here.
        assert_eq!(weight("root-1", "owner-a"), 0xef1f_492f_58de_aef5);
        assert_eq!(weight("root-1", "owner-b"), 0x91f1_ba92_a4ad_06dc);
        assert_ne!(weight("ab", "c"), weight("a", "bc"), "the separator keeps inputs apart");
    }

    #[test]
    fn the_pick_does_not_depend_on_node_order() {
        let forward = nodes(&["owner-a", "owner-b", "owner-c", "owner-d"]);
        let mut backward = forward.clone();
        backward.reverse();
        for i in 0..200 {
            let key = format!("exec-{i}");
            assert_eq!(
                pick(&key, &forward).map(|n| &n.node_id),
                pick(&key, &backward).map(|n| &n.node_id)
            );
        }
        assert!(pick("x", &[]).is_none());
    }

    #[test]
    fn keys_spread_over_every_node() {
        let all = nodes(&["owner-a", "owner-b", "owner-c", "owner-d"]);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for i in 0..4000 {
            let key = format!("exec-{i}");
            let n = pick(&key, &all).map(|n| n.node_id.as_str()).unwrap_or_default();
            *counts.entry(n).or_default() += 1;
        }
        assert_eq!(counts.len(), 4);
        for (n, c) in counts {
            assert!((800..=1200).contains(&c), "{n} got {c} of 4000 keys");
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let all = nodes(&["owner-a", "owner-b", "owner-c", "owner-d"]);
        let without_c = nodes(&["owner-a", "owner-b", "owner-d"]);
        let mut moved = 0;
        for i in 0..2000 {
            let key = format!("exec-{i}");
            let before = pick(&key, &all).map(|n| n.node_id.clone()).unwrap_or_default();
            let after = pick(&key, &without_c).map(|n| n.node_id.clone()).unwrap_or_default();
            if before == "owner-c" {
                moved += 1;
                assert_ne!(after, "owner-c");
            } else {
                assert_eq!(before, after, "{key} moved although its node stayed");
            }
        }
        assert!(moved > 0, "owner-c held some keys");
    }
}

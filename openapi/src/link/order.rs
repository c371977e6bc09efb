//! The order to call a document's operations in: producers before their consumers.

use std::collections::{BTreeMap, BTreeSet};

use super::binding::Binding;
use crate::operation::{Method, Operation};

/// Producers before consumers (Kahn's algorithm); among the ready, creations first, DELETEs last,
/// then document order. A cycle (links both ways) is broken at its earliest operation, and noted.
pub(super) fn order(
    ops: &[Operation],
    bindings: &[Binding],
    notes: &mut Vec<String>,
) -> Vec<String> {
    let index: BTreeMap<&str, usize> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| (o.id.as_str(), i))
        .collect();
    let mut edges: BTreeSet<(usize, usize)> = BTreeSet::new();
    for b in bindings {
        if let (Some(&p), Some(&c)) = (
            index.get(b.producer.as_str()),
            index.get(b.consumer.as_str()),
        ) {
            if p != c {
                edges.insert((p, c));
            }
        }
    }
    // Producers by their bindings, before the ordering edges below are added.
    let producers: BTreeSet<usize> = edges.iter().map(|(p, _)| *p).collect();
    // Of one producer's consumers, the others before the DELETEs.
    let mut by_producer: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (p, c) in &edges {
        by_producer.entry(*p).or_default().push(*c);
    }
    for consumers in by_producer.values() {
        for a in consumers {
            for d in consumers {
                if ops[*d].method == Method::Delete && ops[*a].method != Method::Delete {
                    edges.insert((*a, *d));
                }
            }
        }
    }
    let phase = |i: usize| {
        if ops[i].method == Method::Delete {
            2
        } else if producers.contains(&i) {
            0
        } else {
            1
        }
    };
    let mut indegree = vec![0usize; ops.len()];
    for (_, c) in &edges {
        indegree[*c] += 1;
    }
    let mut done = vec![false; ops.len()];
    let mut out = Vec::with_capacity(ops.len());
    while out.len() < ops.len() {
        let ready = (0..ops.len())
            .filter(|i| !done[*i] && indegree[*i] == 0)
            .min_by_key(|i| (phase(*i), *i));
        let next = match ready {
            Some(i) => i,
            None => {
                let i = (0..ops.len())
                    .filter(|i| !done[*i])
                    .min_by_key(|i| (phase(*i), *i))
                    .unwrap_or(0);
                notes.push(format!(
                    "{} feeds and is fed by others in a cycle; it is called first",
                    ops[i].label()
                ));
                i
            }
        };
        done[next] = true;
        out.push(ops[next].id.clone());
        for (p, c) in &edges {
            if *p == next && !done[*c] {
                indegree[*c] = indegree[*c].saturating_sub(1);
            }
        }
    }
    out
}

//! A Redis proxy's rules, compiled once, and what they decide for one command.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use primitives::glob::{Case, Glob};

use crate::config::{Counts, OnViolation, RedisConfig, RedisFault};
use crate::draw::{Draw, SubjectCounts};

/// A Redis proxy: its compiled rules, its bounds, and the counts its connections share. One per
/// proxy, shared by its sessions; replaced as a whole when the rules change.
pub struct RedisProxy {
    pub(crate) name: String,
    pub(crate) max_message: usize,
    pub(crate) max_key: usize,
    pub(crate) max_pipeline: usize,
    pub(crate) on_violation: OnViolation,
    rules: Vec<Rule>,
    draw: Arc<dyn Draw>,
    probabilistic: bool,
    connections: AtomicU64,
    pub(crate) attempts: SubjectCounts,
}

impl std::fmt::Debug for RedisProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisProxy")
            .field("name", &self.name)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

struct Rule {
    id: String,
    names: Option<Vec<String>>,
    key: Option<Glob>,
    connections: Option<Counts>,
    commands: Option<Counts>,
    hits: Option<Counts>,
    probability: Option<f64>,
    fault: RedisFault,
    hit_count: AtomicU64,
}

/// What a command is, as the rules see it.
pub(crate) struct CommandFacts<'a> {
    pub(crate) name: &'a str,
    pub(crate) key: Option<&'a str>,
    pub(crate) connection: u64,
    pub(crate) command: u64,
    pub(crate) subject: Option<(&'a str, u64)>,
}

/// The rule that fired on a command.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) rule: String,
    pub(crate) fault: RedisFault,
    pub(crate) draw: Option<f64>,
}

impl RedisProxy {
    /// A proxy named `name` with these validated settings; `draw` is the seeded draw behind
    /// `probability` rules.
    pub fn new(name: &str, cfg: &RedisConfig, draw: Arc<dyn Draw>) -> Arc<RedisProxy> {
        let rules: Vec<Rule> = cfg
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let m = &r.matcher;
                Rule {
                    id: crate::config::rule_id(r.id.as_ref(), i),
                    names: m.command.as_ref().map(|n| n.0.clone()),
                    key: m.key.as_ref().map(|p| Glob::text(&p.0, Case::Sensitive)),
                    connections: m.connections.clone(),
                    commands: m.commands.clone(),
                    hits: m.hits.clone(),
                    probability: m.probability.map(|p| p.0),
                    fault: r.fault.clone(),
                    hit_count: AtomicU64::new(0),
                }
            })
            .collect();
        Arc::new(RedisProxy {
            name: name.to_string(),
            max_message: usize::try_from(cfg.max_message.0).unwrap_or(usize::MAX),
            max_key: usize::try_from(cfg.max_key.0).unwrap_or(usize::MAX),
            max_pipeline: cfg.max_pipeline as usize,
            on_violation: cfg.on_violation,
            probabilistic: rules.iter().any(|r| r.probability.is_some()),
            rules,
            draw,
            connections: AtomicU64::new(0),
            attempts: SubjectCounts::new(65_536),
        })
    }

    /// The proxy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The longest command its readers read whole.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// What a connection whose bytes break the protocol gets.
    pub fn on_violation(&self) -> OnViolation {
        self.on_violation
    }

    pub(crate) fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn needs_subjects(&self) -> bool {
        self.probabilistic
    }

    /// The first rule that matches a command.
    pub(crate) fn decide(&self, c: &CommandFacts<'_>) -> Option<Decision> {
        self.rules.iter().find_map(|r| {
            if r.names
                .as_ref()
                .is_some_and(|n| !n.iter().any(|n| n == c.name))
            {
                return None;
            }
            if let Some(g) = &r.key {
                if !c.key.is_some_and(|k| g.matches(k)) {
                    return None;
                }
            }
            if r.connections
                .as_ref()
                .is_some_and(|n| !n.contains(c.connection))
            {
                return None;
            }
            if r.commands.as_ref().is_some_and(|n| !n.contains(c.command)) {
                return None;
            }
            if let Some(h) = &r.hits {
                let n = r.hit_count.fetch_add(1, Ordering::Relaxed) + 1;
                if !h.contains(n) {
                    return None;
                }
            }
            let mut draw = None;
            if let Some(p) = r.probability {
                let (subject, attempt) = c.subject.unwrap_or(("", 1));
                let u = self.draw.uniform(&r.id, subject, attempt);
                if u >= p {
                    return None;
                }
                draw = Some(u);
            }
            Some(Decision {
                rule: r.id.clone(),
                fault: r.fault.clone(),
                draw,
            })
        })
    }
}

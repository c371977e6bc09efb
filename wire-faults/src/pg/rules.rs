//! A PostgreSQL proxy's rules, compiled once, and what they decide for one statement.
//!
//! Rules are tried in order and the first that matches wins. A rule's cheap conditions (the
//! statement's text, its transaction's and connection's numbers, the COMMIT counts) are tested
//! first; its hit counter counts only statements that met them; the probability draw comes
//! last — as the fault server's HTTP schedule does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use primitives::glob::{Case, Glob};

use crate::config::{Counts, PgFault, PostgresConfig};
use crate::draw::{Draw, SubjectCounts};

/// A PostgreSQL proxy: its compiled rules, its bounds, and the counts its connections share
/// (connections, COMMITs, rule hits, attempts of each transaction). One per proxy, shared by
/// its sessions; replaced as a whole when the rules change.
pub struct PgProxy {
    pub(crate) name: String,
    pub(crate) max_message: usize,
    pub(crate) max_statement: usize,
    pub(crate) max_pipeline: usize,
    pub(crate) on_violation: crate::config::OnViolation,
    rules: Vec<Rule>,
    draw: Arc<dyn Draw>,
    probabilistic: bool,
    connections: AtomicU64,
    commits: AtomicU64,
    pub(crate) attempts: SubjectCounts,
}

impl std::fmt::Debug for PgProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgProxy")
            .field("name", &self.name)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

struct Rule {
    id: String,
    statement: Option<Glob>,
    regex: Option<regex::Regex>,
    in_block: Option<bool>,
    startup: bool,
    connections: Option<Counts>,
    transactions: Option<Counts>,
    commits: Option<Counts>,
    connection_commits: Option<Counts>,
    hits: Option<Counts>,
    probability: Option<f64>,
    fault: PgFault,
    hit_count: AtomicU64,
}

/// What a statement is, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatementFacts<'a> {
    pub(crate) text: &'a str,
    pub(crate) block: bool,
    pub(crate) connection: u64,
    pub(crate) transaction: u64,
    /// For a COMMIT: its number over the proxy and on its connection.
    pub(crate) commit: Option<(u64, u64)>,
    /// The draw's subject and attempt.
    pub(crate) subject: Option<(&'a str, u64)>,
}

/// The rule that fired on a statement, its fault, and the draw behind it.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) rule: String,
    pub(crate) fault: PgFault,
    pub(crate) draw: Option<f64>,
}

impl PgProxy {
    /// A proxy named `name` (the journal's `proxy`) with these validated settings; `draw` is the
    /// seeded draw behind `probability` rules.
    pub fn new(name: &str, cfg: &PostgresConfig, draw: Arc<dyn Draw>) -> Arc<PgProxy> {
        let rules: Vec<Rule> = cfg
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let m = &r.matcher;
                Rule {
                    id: crate::config::rule_id(r.id.as_ref(), i),
                    statement: m
                        .statement
                        .as_ref()
                        .map(|p| Glob::text(&p.0, Case::FoldAscii)),
                    regex: m.statement_regex.as_ref().map(|r| r.0.clone()),
                    in_block: m.in_block,
                    startup: m.startup,
                    connections: m.connections.clone(),
                    transactions: m.transactions.clone(),
                    commits: m.commits.clone(),
                    connection_commits: m.connection_commits.clone(),
                    hits: m.hits.clone(),
                    probability: m.probability.map(|p| p.0),
                    fault: r.fault.clone(),
                    hit_count: AtomicU64::new(0),
                }
            })
            .collect();
        Arc::new(PgProxy {
            name: name.to_string(),
            max_message: usize::try_from(cfg.max_message.0).unwrap_or(usize::MAX),
            max_statement: usize::try_from(cfg.max_statement.0).unwrap_or(usize::MAX),
            max_pipeline: cfg.max_pipeline as usize,
            on_violation: cfg.on_violation,
            probabilistic: rules.iter().any(|r| r.probability.is_some()),
            rules,
            draw,
            connections: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            attempts: SubjectCounts::new(65_536),
        })
    }

    /// The proxy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The longest message its readers read whole.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// What a connection whose bytes break the protocol gets.
    pub fn on_violation(&self) -> crate::config::OnViolation {
        self.on_violation
    }

    pub(crate) fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn next_commit(&self) -> u64 {
        self.commits.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn needs_subjects(&self) -> bool {
        self.probabilistic
    }

    /// The first rule that matches a statement.
    pub(crate) fn decide(&self, s: &StatementFacts<'_>) -> Option<Decision> {
        self.rules.iter().find_map(|r| {
            if r.startup || !r.statement_match(s) {
                return None;
            }
            self.fire(r, s.subject)
        })
    }

    /// The first startup rule that matches the connection's startup.
    pub(crate) fn decide_startup(&self, connection: u64, subject: (&str, u64)) -> Option<Decision> {
        self.rules.iter().find_map(|r| {
            if !r.startup
                || r.connections
                    .as_ref()
                    .is_some_and(|c| !c.contains(connection))
            {
                return None;
            }
            self.fire(r, Some(subject))
        })
    }

    /// The rule's hit counted, then its draw: whether it fires.
    fn fire(&self, r: &Rule, subject: Option<(&str, u64)>) -> Option<Decision> {
        if let Some(h) = &r.hits {
            let n = r.hit_count.fetch_add(1, Ordering::Relaxed) + 1;
            if !h.contains(n) {
                return None;
            }
        }
        let mut draw = None;
        if let Some(p) = r.probability {
            let (subject, attempt) = subject.unwrap_or(("", 1));
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
    }
}

impl Rule {
    fn statement_match(&self, s: &StatementFacts<'_>) -> bool {
        if self.statement.as_ref().is_some_and(|g| !g.matches(s.text)) {
            return false;
        }
        if self.regex.as_ref().is_some_and(|r| !r.is_match(s.text)) {
            return false;
        }
        if self.in_block.is_some_and(|b| b != s.block) {
            return false;
        }
        if self
            .connections
            .as_ref()
            .is_some_and(|c| !c.contains(s.connection))
        {
            return false;
        }
        if self
            .transactions
            .as_ref()
            .is_some_and(|c| !c.contains(s.transaction))
        {
            return false;
        }
        if let Some(c) = &self.commits {
            if !s.commit.is_some_and(|(all, _)| c.contains(all)) {
                return false;
            }
        }
        if let Some(c) = &self.connection_commits {
            if !s.commit.is_some_and(|(_, here)| c.contains(here)) {
                return false;
            }
        }
        true
    }
}

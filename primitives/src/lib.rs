//! The small pure pieces more than one crate of the project needs, written once:
//!
//! - [`draw`]: seeded draws — FNV-1a to hash what a decision is about, SplitMix64 to mix the hash
//!   into a well-spread word, and the word as a uniform number in [0, 1). The fault server's
//!   schedule, the webhook provider's chaos and the harness's own seeded choices all draw this
//!   way, so a decision is a pure function of the seed and what it decides, whatever the order
//!   things happen in.
//! - [`template`]: the `{{name}}` syntax of the harness's request templates and the webhook
//!   payload template: text split into literal pieces and placeholder names, each user deciding
//!   which names it knows.
//! - [`glob`]: the globs the fault server's rules, the audit's operation selectors and the
//!   protocol proxies' statement and key rules are written in: a path syntax (`*` within a
//!   segment, `**` across) and a text syntax (`*`, `?`, optionally without ASCII case), one
//!   matcher that never backtracks.
//!
//! - [`metric`]: a Prometheus metric's prefix, name, kind and help, as the fault server's and the
//!   harness's `/metrics` register them and the Grafana dashboard's tests read them.
//!
//! *Invariant:* no dependency at all, no I/O, no clock: every function here is a function of its
//! arguments, so a value drawn today is the value drawn by every later build (the tests pin
//! them).

#![warn(missing_docs)]

pub mod draw;
pub mod glob;
pub mod metric;
pub mod template;

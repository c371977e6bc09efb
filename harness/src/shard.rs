//! Shards: one run split over N processes (the pods of a Kubernetes Indexed Job, say) that know
//! only their index, the count, and a common start time.
//!
//! The split is deterministic and needs no coordination: shard `i` of `n` takes every `n`th item
//! of each global sequence, starting at `i`. A rate phase's schedule is the unsharded one, and the
//! shard sends the operations `i`, `i + n`, `i + 2n`, … of it, so the union of the shards' sends
//! is exactly the schedule one process would have run. Clients, connections, requests and burst
//! members are split the same way (the first `total % n` shards take one more), and everything
//! numbered — operations, clients, and so keys, `{{seq}}` and random seeds — is numbered globally,
//! so no two shards use the same key unless they are meant to: a burst round's key is the same on
//! every shard, and so are its instant and its members' numbering across shards.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most shards a run may be split into.
pub const MAX_SHARDS: u32 = 10_000;

/// This process's part of a run: shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    /// From 0.
    pub index: u32,
    /// At least 1.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::WHOLE
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The whole run in one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// A shard, checked: `index < count <= MAX_SHARDS`.
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 || count > MAX_SHARDS {
            return Err(format!(
                "the shard count must be 1 to {MAX_SHARDS}, got {count}"
            ));
        }
        if index >= count {
            return Err(format!(
                "shard index {index} is out of range for {count} shards (indices count from 0 to {})",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }

    /// Parses `I/N` (`--shard`).
    pub fn parse(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("expected I/N (e.g. 0/3), got {s:?}"))?;
        let num = |t: &str, what: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("{what} in {s:?} is not a whole number"))
        };
        Shard::new(num(i, "the index")?, num(n, "the count")?)
    }

    /// The shard an Indexed Job's pod is: `JOB_COMPLETION_INDEX` and `HARNESS_SHARDS`, when set;
    /// `lookup` reads the environment.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>, String> {
        let index = lookup("JOB_COMPLETION_INDEX");
        let count = lookup("HARNESS_SHARDS");
        match (index, count) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(
                "JOB_COMPLETION_INDEX is set but HARNESS_SHARDS is not: set it to the Job's completions"
                    .into(),
            ),
            (None, Some(n)) => {
                let n: u32 = n
                    .trim()
                    .parse()
                    .map_err(|_| format!("HARNESS_SHARDS={n:?} is not a whole number"))?;
                if n <= 1 {
                    Ok(None)
                } else {
                    Err(format!(
                        "HARNESS_SHARDS={n} but JOB_COMPLETION_INDEX is not set: give --shard I/{n}"
                    ))
                }
            }
            (Some(i), Some(n)) => {
                let i: u32 = i
                    .trim()
                    .parse()
                    .map_err(|_| format!("JOB_COMPLETION_INDEX={i:?} is not a whole number"))?;
                let n: u32 = n
                    .trim()
                    .parse()
                    .map_err(|_| format!("HARNESS_SHARDS={n:?} is not a whole number"))?;
                Shard::new(i, n).map(Some)
            }
        }
    }

    /// True when the run is split.
    pub fn is_split(self) -> bool {
        self.count > 1
    }

    /// This shard's share of `total` items: `total / n`, one more for the first `total % n`.
    pub fn share(self, total: u64) -> u64 {
        let n = u64::from(self.count);
        total / n + u64::from(u64::from(self.index) < total % n)
    }

    /// The global number of this shard's `local`th item (both from 0).
    pub fn global(self, local: u64) -> u64 {
        local
            .saturating_mul(u64::from(self.count))
            .saturating_add(u64::from(self.index))
    }

    /// How many of the first `global` items (numbers `0..global`) are this shard's.
    pub fn mine_below(self, global: u64) -> u64 {
        let i = u64::from(self.index);
        if global <= i {
            0
        } else {
            (global - i).div_ceil(u64::from(self.count))
        }
    }
}

/// A wall-clock instant, milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Parses a start time: RFC 3339 (`2026-12-01T10:00:00Z`) or milliseconds since the Unix epoch.
pub fn parse_start_at(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .map_err(|_| format!("{s:?} is too large for milliseconds since the Unix epoch"));
    }
    let at = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            format!("{s:?} is neither RFC 3339 (2026-12-01T10:00:00Z) nor unix milliseconds: {e}")
        })?;
    let ms = at.unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms).map_err(|_| format!("{s:?} is before 1970 or too far in the future"))
}

/// How far from now a start time may be: a day ahead (a typo in the date should not leave a Job
/// waiting for a year).
pub const MAX_START_AHEAD: Duration = Duration::from_secs(24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_total_exactly_once() {
        for n in 1..=7u32 {
            for total in [0u64, 1, 5, 10, 11, 1000, 1001] {
                let shards: Vec<Shard> = (0..n).map(|i| Shard::new(i, n).unwrap()).collect();
                let sum: u64 = shards.iter().map(|s| s.share(total)).sum();
                assert_eq!(sum, total, "n={n} total={total}");
                // The global numbers of every shard's items are exactly 0..total.
                let mut all: Vec<u64> = shards
                    .iter()
                    .flat_map(|s| (0..s.share(total)).map(|l| s.global(l)))
                    .collect();
                all.sort_unstable();
                assert_eq!(all, (0..total).collect::<Vec<_>>());
                for s in &shards {
                    for g in [0, 1, 5, 17, total] {
                        let by_hand = (0..g).filter(|x| x % u64::from(n) == u64::from(s.index));
                        assert_eq!(s.mine_below(g), by_hand.count() as u64, "{s} below {g}");
                    }
                }
            }
        }
    }

    #[test]
    fn shards_parse_from_the_flag_and_the_environment() {
        assert_eq!(Shard::parse("2/3"), Ok(Shard { index: 2, count: 3 }));
        assert!(Shard::parse("3/3").unwrap_err().contains("out of range"));
        assert!(Shard::parse("0/0").unwrap_err().contains("1 to 10000"));
        assert!(Shard::parse("1").unwrap_err().contains("I/N"));
        assert!(Shard::parse("a/3").unwrap_err().contains("index"));
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(Shard::from_env(env(&[])), Ok(None));
        assert_eq!(
            Shard::from_env(env(&[
                ("JOB_COMPLETION_INDEX", "1"),
                ("HARNESS_SHARDS", "3")
            ])),
            Ok(Some(Shard { index: 1, count: 3 }))
        );
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "1")]))
            .unwrap_err()
            .contains("HARNESS_SHARDS"));
        assert!(Shard::from_env(env(&[("HARNESS_SHARDS", "3")]))
            .unwrap_err()
            .contains("--shard"));
        assert_eq!(Shard::from_env(env(&[("HARNESS_SHARDS", "1")])), Ok(None));
    }

    #[test]
    fn start_times_parse_as_rfc3339_or_unix_ms() {
        assert_eq!(parse_start_at("1764583200000"), Ok(1_764_583_200_000));
        assert_eq!(
            parse_start_at("2025-12-01T10:00:00Z"),
            Ok(1_764_583_200_000)
        );
        assert_eq!(
            parse_start_at("2025-12-01T10:00:00.250Z"),
            Ok(1_764_583_200_250)
        );
        assert_eq!(
            parse_start_at("2025-12-01T11:00:00+01:00"),
            Ok(1_764_583_200_000)
        );
        assert!(parse_start_at("tomorrow").unwrap_err().contains("RFC 3339"));
    }
}

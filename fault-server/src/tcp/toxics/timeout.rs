//! `timeout`: nothing gets through (the data is read and dropped), and the connection is closed
//! `timeout` ms after the toxic began to act; with 0 it is never closed, and data is dropped
//! until the toxic is removed — which then closes the connection, its stream being broken.

use std::time::{Duration, Instant};

use super::{AttrError, Attrs, MAX_MS};

/// The time before the close, ms (0: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    /// ms until the connection is closed; 0 for never.
    pub timeout: u64,
}

impl Timeout {
    pub(crate) fn parse(a: &mut Attrs<'_>) -> Result<Timeout, AttrError> {
        Ok(Timeout {
            timeout: a.int("timeout", MAX_MS, "milliseconds")?,
        })
    }
}

/// A `timeout` on one direction: when it closes the connection.
#[derive(Debug)]
pub struct Run {
    close_at: Option<Instant>,
}

impl Run {
    pub(super) fn new(t: &Timeout, now: Instant) -> Run {
        Run {
            close_at: (t.timeout > 0).then(|| now + Duration::from_millis(t.timeout)),
        }
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.close_at
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{attrs, run};
    use super::super::{Cut, ToxicKind};

    #[test]
    fn data_is_dropped_and_the_close_is_due_at_the_timeout() {
        let t = ToxicKind::parse("timeout", &attrs(r#"{"timeout": 300}"#)).unwrap();
        let (out, dropped) = run(&t, &[(0, 10), (5, 20)], None);
        assert!(out.is_empty());
        assert_eq!(dropped, 30);
        let now = std::time::Instant::now();
        let r = t.start(now);
        assert_eq!(
            r.deadline(),
            Some((now + std::time::Duration::from_millis(300), Cut::TimedOut))
        );
        assert_eq!(r.on_removal(), Some(Cut::TimedOut));
        let never = ToxicKind::parse("timeout", &attrs(r#"{"timeout": 0}"#)).unwrap();
        assert_eq!(never.start(now).deadline(), None);
    }
}

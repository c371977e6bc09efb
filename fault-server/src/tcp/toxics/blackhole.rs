//! `blackhole`: the cable pulled. While it acts, its direction is frozen: nothing is read from
//! the source (whose sends pile up in its socket buffers, then block, as over a dead link),
//! nothing is written to the destination, and no close is passed on — nothing answers and
//! nothing closes, so only a client's own timeout gets it out. Removed (or its window over),
//! what was held flows on, as a link that comes back delivers what TCP kept retrying. Not in
//! Toxiproxy, whose `timeout` drops data and closes.
//!
//! The toxic has no attributes and no state; the pipe asks [`super::Running::freezes`].

#[cfg(test)]
mod tests {
    use super::super::testing::attrs;
    use super::super::ToxicKind;

    #[test]
    fn a_blackhole_freezes_its_direction_and_ends_nothing() {
        let t = ToxicKind::parse("blackhole", &attrs("{}")).unwrap();
        let r = t.start(std::time::Instant::now());
        assert!(r.freezes());
        assert_eq!(r.deadline(), None);
        assert_eq!(r.on_removal(), None);
        assert!(ToxicKind::parse("blackhole", &attrs(r#"{"timeout": 1}"#)).is_err());
    }
}

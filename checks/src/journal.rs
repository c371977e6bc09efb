//! The journal as the checks read it: an [`Entry`] plus fields a server may add later.
//!
//! Why a separate record: the journal format grows (the contract says readers ignore fields they
//! do not know), and [`Entry`] belongs to the fault server. A check that can use a newer field
//! reads it through [`JournalItem`] and falls back to its configuration when the field is absent.
//! Today that is the Retry-After the server sent: from the entry's recorded response headers
//! (`response_headers`, which the fault server writes), or a journal field `retry_after_s`; the
//! `retry_after` check takes it from its configuration only for journals with neither.

use history::Entry;
use serde::Deserialize;

/// Anything the checks can read as one journal entry.
pub trait JournalItem {
    /// The entry itself.
    fn entry(&self) -> &Entry;
    /// The Retry-After (seconds) sent with this entry's response, when the journal recorded it.
    fn retry_after_s(&self) -> Option<f64> {
        None
    }
}

impl JournalItem for Entry {
    fn entry(&self) -> &Entry {
        self
    }
    fn retry_after_s(&self) -> Option<f64> {
        recorded_retry_after_s(self)
    }
}

/// The Retry-After recorded with an entry's response, in seconds: delay-seconds as they are, an
/// HTTP-date (IMF-fixdate) as the time from the request's arrival to that date.
pub fn recorded_retry_after_s(e: &Entry) -> Option<f64> {
    let v = e.response_header("retry-after")?.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(s as f64);
    }
    let at_ms = imf_fixdate_unix_ms(v)?;
    Some(at_ms.saturating_sub(e.unix_ms) as f64 / 1000.0)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` as ms since the Unix epoch (the one date format RFC 9110
/// requires senders to use).
fn imf_fixdate_unix_ms(v: &str) -> Option<u64> {
    let mut it = v.split_ascii_whitespace();
    let (_wday, day, mon, year, time, gmt) = (
        it.next()?,
        it.next()?,
        it.next()?,
        it.next()?,
        it.next()?,
        it.next()?,
    );
    if gmt != "GMT" || it.next().is_some() {
        return None;
    }
    let day: u64 = day.parse().ok()?;
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == mon)? as u64
        + 1;
    let year: i64 = year.parse().ok()?;
    let mut t = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (t.next()??, t.next()??, t.next()??);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || year < 1970 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mon <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mon as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(((days * 24 + h) * 60 + m) * 60_000 + s * 1000)
}

impl<T: JournalItem + ?Sized> JournalItem for &T {
    fn entry(&self) -> &Entry {
        (**self).entry()
    }
    fn retry_after_s(&self) -> Option<f64> {
        (**self).retry_after_s()
    }
}

/// One journal line with the optional fields the checks understand beyond [`Entry`].
///
/// Deserialize journal lines into this type (instead of [`Entry`]) to let the checks use them;
/// unknown fields are ignored either way.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JournalRecord {
    /// The entry as the fault server defines it.
    #[serde(flatten)]
    pub entry: Entry,
    /// Retry-After sent with the response, in seconds (absent from today's fault server).
    #[serde(default)]
    pub retry_after_s: Option<f64>,
}

impl JournalItem for JournalRecord {
    fn entry(&self) -> &Entry {
        &self.entry
    }
    fn retry_after_s(&self) -> Option<f64> {
        self.retry_after_s
            .or_else(|| recorded_retry_after_s(&self.entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_retry_after_and_ignores_unknown_fields() {
        let line = r#"{"seq":1,"t_recv_us":0,"t_done_us":5,"unix_ms":1,"method":"POST",
            "path":"/orders","outcome":"responded","status":503,"retry_after_s":2.5,"new_field":1}"#;
        let r: JournalRecord = serde_json::from_str(line).expect("valid test line");
        assert_eq!(r.retry_after_s(), Some(2.5));
        assert_eq!(r.entry().status, Some(503));
        let plain: JournalRecord =
            serde_json::from_str(&line.replace(r#""retry_after_s":2.5,"#, ""))
                .expect("valid test line");
        assert_eq!(plain.retry_after_s(), None);
    }

    #[test]
    fn the_recorded_retry_after_is_read_as_seconds_or_a_date() {
        let mut e = history::sample::entry(1, 0.0)
            .status(503)
            .response_header("retry-after", "3")
            .build();
        assert_eq!(e.retry_after_s(), Some(3.0));
        // 2025-12-01T10:00:00Z is 1764583200000 ms.
        e.unix_ms = 1_764_583_198_500;
        e.response_headers = Some(
            [(
                "retry-after".to_string(),
                "Mon, 01 Dec 2025 10:00:00 GMT".to_string(),
            )]
            .into(),
        );
        assert_eq!(e.retry_after_s(), Some(1.5));
        for bad in [
            "soon",
            "Mon, 01 Foo 2025 10:00:00 GMT",
            "-1",
            "Mon, 01 Dec 2025 10:00 GMT",
        ] {
            e.response_headers = Some([("retry-after".to_string(), bad.to_string())].into());
            assert_eq!(e.retry_after_s(), None, "{bad}");
        }
        e.response_headers = None;
        assert_eq!(e.retry_after_s(), None);
    }
}

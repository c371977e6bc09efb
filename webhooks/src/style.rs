//! The providers whose deliveries the crate plays, and what each one fixes: its name on the
//! command line, its event ids, its timestamp tolerance, its timeout and its redelivery.
//!
//! One enum rather than a trait: three known providers, each a handful of constants, read in one
//! place; the signer and the verifier match on it where the providers' formats differ.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::draw;
use crate::redeliver::{Redelivery, Schedule};

/// A webhook provider's way of delivering: headers, signature and ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Style {
    /// [Standard Webhooks](https://www.standardwebhooks.com/) (Svix and its users):
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of
    /// "id.timestamp.body">`, `whsec_` secrets holding the key in base64.
    StandardWebhooks,
    /// Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`, the key
    /// being the secret's own bytes.
    Stripe,
    /// GitHub: `X-GitHub-Delivery` (a GUID), `X-GitHub-Event`, `X-Hub-Signature-256:
    /// sha256=<hex HMAC-SHA256 of the body>`; nothing signs a time.
    Github,
}

impl Style {
    /// Every style, in the order the command line lists them.
    pub const ALL: [Style; 3] = [Style::StandardWebhooks, Style::Stripe, Style::Github];

    /// The style's name on the command line and in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Style::StandardWebhooks => "standard-webhooks",
            Style::Stripe => "stripe",
            Style::Github => "github",
        }
    }

    /// How far a signed timestamp may be from the verifier's clock, in seconds, as the provider's
    /// own verification libraries enforce it: five minutes for Standard Webhooks (both ways) and
    /// Stripe (into the past only); none for GitHub, which signs no time.
    pub fn tolerance(self) -> Option<u64> {
        match self {
            Style::StandardWebhooks | Style::Stripe => Some(300),
            Style::Github => None,
        }
    }

    /// How long the provider waits for an answer before it counts the attempt as failed: Svix's
    /// 15 s for Standard Webhooks, GitHub's documented 10 s, and 10 s for Stripe, which asks for a
    /// prompt 2xx without publishing a number.
    pub fn ack_timeout(self) -> Duration {
        match self {
            Style::StandardWebhooks => Duration::from_secs(15),
            Style::Stripe | Style::Github => Duration::from_secs(10),
        }
    }

    /// The provider's own redelivery: Svix's published schedule for Standard Webhooks (5 s, 5 min,
    /// 30 min, 2 h, 5 h, 10 h, 10 h after each failure: 8 attempts); Stripe's exponential backoff
    /// within three days (Stripe publishes the horizon, not the intervals: here doubling from one
    /// minute); none for GitHub, which does not redeliver a failed delivery by itself.
    pub fn redelivery(self) -> Redelivery {
        const MIN: u64 = 60;
        const HOUR: u64 = 3600;
        let (schedule, max_attempts) = match self {
            Style::StandardWebhooks => (
                Schedule::List(
                    [
                        5,
                        5 * MIN,
                        30 * MIN,
                        2 * HOUR,
                        5 * HOUR,
                        10 * HOUR,
                        10 * HOUR,
                    ]
                    .map(Duration::from_secs)
                    .to_vec(),
                ),
                8,
            ),
            Style::Stripe => (
                Schedule::Exponential {
                    first: Duration::from_secs(MIN),
                    factor: 2.0,
                    within: Duration::from_secs(72 * HOUR),
                },
                Redelivery::MAX_ATTEMPTS,
            ),
            Style::Github => (Schedule::List(Vec::new()), 1),
        };
        Redelivery {
            timeout: self.ack_timeout(),
            schedule,
            max_attempts,
        }
    }

    /// The id of event `number` of a run seeded with `seed`, in the provider's usual form:
    /// `msg_` and 27 base62 characters (a Svix message id), `evt_` and 24 (a Stripe event id),
    /// or a GUID (GitHub's `X-GitHub-Delivery`). A function of its arguments, so that a rerun
    /// with the same seed sends the same ids and the chaos drawn from them is the same.
    pub fn event_id(self, seed: u64, number: u64) -> String {
        let n = number.to_string();
        let words = [0, 1, 2].map(|salt| draw::word(seed, "event-id", &n, salt));
        match self {
            Style::StandardWebhooks => base62("msg_", &words, 27),
            Style::Stripe => base62("evt_", &words, 24),
            Style::Github => {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&words[0].to_le_bytes());
                bytes[8..].copy_from_slice(&words[1].to_le_bytes());
                uuid::Builder::from_random_bytes(bytes)
                    .into_uuid()
                    .hyphenated()
                    .to_string()
            }
        }
    }
}

/// `prefix` and `len` base62 characters taken from `words` (each word gives 10, 62^10 < 2^64).
fn base62(prefix: &str, words: &[u64], len: usize) -> String {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(prefix.len() + len);
    out.push_str(prefix);
    for &w in words {
        let mut w = w;
        for _ in 0..10 {
            if out.len() == prefix.len() + len {
                return out;
            }
            out.push(char::from(ALPHABET[(w % 62) as usize]));
            w /= 62;
        }
    }
    out
}

impl fmt::Display for Style {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A style name that is none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown webhook style {0:?} (expected standard-webhooks, stripe or github)")]
pub struct UnknownStyle(pub String);

impl FromStr for Style {
    type Err = UnknownStyle;

    fn from_str(s: &str) -> Result<Style, UnknownStyle> {
        Style::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| UnknownStyle(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for s in Style::ALL {
            assert_eq!(s.name().parse::<Style>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
        }
        let e = "svix".parse::<Style>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown webhook style \"svix\" (expected standard-webhooks, stripe or github)"
        );
    }

    #[test]
    fn event_ids_have_each_providers_form() {
        let sw = Style::StandardWebhooks.event_id(1, 0);
        assert!(sw.starts_with("msg_") && sw.len() == 31, "{sw}");
        let stripe = Style::Stripe.event_id(1, 0);
        assert!(stripe.starts_with("evt_") && stripe.len() == 28, "{stripe}");
        for id in [&sw[4..], &stripe[4..]] {
            assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
        }
        let guid = Style::Github.event_id(1, 0);
        let parsed = uuid::Uuid::parse_str(&guid).expect("a GUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(guid.len(), 36);
        assert_eq!(guid, parsed.hyphenated().to_string());
    }

    #[test]
    fn event_ids_are_reproducible_and_distinct() {
        for style in Style::ALL {
            assert_eq!(style.event_id(9, 3), style.event_id(9, 3));
            assert_ne!(style.event_id(9, 3), style.event_id(10, 3));
            let ids: std::collections::HashSet<String> =
                (0..5000).map(|n| style.event_id(9, n)).collect();
            assert_eq!(ids.len(), 5000, "{style}");
        }
    }

    #[test]
    fn each_providers_redelivery() {
        let sw = Style::StandardWebhooks.redelivery();
        assert_eq!(sw.max_attempts, 8);
        assert_eq!(sw.timeout, Duration::from_secs(15));
        let Schedule::List(delays) = &sw.schedule else {
            panic!("{sw:?}")
        };
        // "An attempt that fails three times before eventually succeeding will be delivered
        // roughly 35 minutes and 5 seconds following the first attempt" (Svix's documentation).
        assert_eq!(
            delays[..3].iter().sum::<Duration>(),
            Duration::from_secs(35 * 60 + 5)
        );
        assert_eq!(Style::Github.redelivery().max_attempts, 1);
        assert_eq!(Style::Stripe.redelivery().timeout, Duration::from_secs(10));
    }
}

//! Verifying a delivery as the provider's own libraries do, for consumers written in Rust.
//!
//! The rules follow the published libraries, not a reading of the prose: Standard Webhooks
//! (`standardwebhooks`, `svix`) refuses a timestamp more than the tolerance away from the clock
//! *either way* and accepts any one of several space-separated `v1,` signatures; Stripe
//! (`stripe.Webhook.construct_event`) refuses a timestamp older than the tolerance, never a newer
//! one, and accepts any one of several `v1=`; GitHub (`@octokit/webhooks-methods`) compares
//! `X-Hub-Signature-256` alone. Signatures are compared in constant time (`hmac`'s
//! `verify_slice`). Like the signer, the verifier is given the time instead of reading a clock.

use base64::Engine;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::sign::{
    new_mac, GITHUB_DELIVERY, HUB_SIGNATURE_256, STRIPE_SIGNATURE, WEBHOOK_ID, WEBHOOK_SIGNATURE,
    WEBHOOK_TIMESTAMP,
};
use crate::{Secret, Style};

/// Why a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A header the style requires is absent (or not text).
    #[error("missing header {0}")]
    Missing(&'static str),
    /// A header is there but not in the style's format.
    #[error("malformed header {0}")]
    Malformed(&'static str),
    /// The timestamp is older than the tolerance allows.
    #[error("timestamp {timestamp} is more than {tolerance} s old")]
    TooOld {
        /// The delivery's timestamp.
        timestamp: u64,
        /// The tolerance, in seconds.
        tolerance: u64,
    },
    /// The timestamp is further in the future than the tolerance allows.
    #[error("timestamp {timestamp} is more than {tolerance} s in the future")]
    TooNew {
        /// The delivery's timestamp.
        timestamp: u64,
        /// The tolerance, in seconds.
        tolerance: u64,
    },
    /// No signature matches the body under any of the secrets.
    #[error("no signature matches")]
    NoMatch,
}

/// Verifies deliveries of one style.
#[derive(Debug, Clone)]
pub struct Verifier {
    style: Style,
    secrets: Vec<Secret>,
    tolerance: Option<u64>,
}

impl Verifier {
    /// A verifier for `style` with `secret`, enforcing the style's tolerance.
    pub fn new(style: Style, secret: Secret) -> Verifier {
        Verifier {
            style,
            secrets: vec![secret],
            tolerance: style.tolerance(),
        }
    }

    /// Also accepts signatures made with `other` (a secret being rotated out).
    pub fn also_accepting(mut self, other: Secret) -> Verifier {
        self.secrets.push(other);
        self
    }

    /// The tolerance in seconds, or `None` to check no timestamp at all (the consumer bug the
    /// `stale` forgery finds).
    pub fn with_tolerance(mut self, tolerance: Option<u64>) -> Verifier {
        self.tolerance = tolerance;
        self
    }

    /// The style.
    pub fn style(&self) -> Style {
        self.style
    }

    /// Whether `body` with `headers` is a genuine delivery at `now` (Unix seconds).
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: u64) -> Result<(), VerifyError> {
        match self.style {
            Style::StandardWebhooks => self.standard_webhooks(headers, body, now),
            Style::Stripe => self.stripe(headers, body, now),
            Style::Github => self.github(headers, body),
        }
    }

    /// The event id a delivery names in its headers: `webhook-id` or `X-GitHub-Delivery` (Stripe
    /// names it in the body only).
    pub fn header_id<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        let name = match self.style {
            Style::StandardWebhooks => WEBHOOK_ID,
            Style::Github => GITHUB_DELIVERY,
            Style::Stripe => return None,
        };
        headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn standard_webhooks(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: u64,
    ) -> Result<(), VerifyError> {
        let id = text(headers, WEBHOOK_ID, "webhook-id")?;
        let stamp = text(headers, WEBHOOK_TIMESTAMP, "webhook-timestamp")?;
        let signatures = text(headers, WEBHOOK_SIGNATURE, "webhook-signature")?;
        let timestamp: u64 = stamp
            .parse()
            .map_err(|_| VerifyError::Malformed("webhook-timestamp"))?;
        if let Some(tolerance) = self.tolerance {
            if now.saturating_sub(timestamp) > tolerance {
                return Err(VerifyError::TooOld {
                    timestamp,
                    tolerance,
                });
            }
            if timestamp.saturating_sub(now) > tolerance {
                return Err(VerifyError::TooNew {
                    timestamp,
                    tolerance,
                });
            }
        }
        let candidates: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .collect();
        self.any_matches(
            &candidates,
            &[id.as_bytes(), b".", stamp.as_bytes(), b".", body],
        )
    }

    fn stripe(&self, headers: &HeaderMap, body: &[u8], now: u64) -> Result<(), VerifyError> {
        let header = text(headers, STRIPE_SIGNATURE, "stripe-signature")?;
        let mut stamp = None;
        let mut candidates = Vec::new();
        for item in header.split(',') {
            match item.split_once('=') {
                Some(("t", t)) => stamp = Some(t),
                Some(("v1", s)) => candidates.extend(hex::decode(s).ok()),
                _ => {}
            }
        }
        let stamp = stamp.ok_or(VerifyError::Malformed("stripe-signature"))?;
        let timestamp: u64 = stamp
            .parse()
            .map_err(|_| VerifyError::Malformed("stripe-signature"))?;
        if candidates.is_empty() {
            return Err(VerifyError::NoMatch);
        }
        self.any_matches(&candidates, &[stamp.as_bytes(), b".", body])?;
        // stripe-python checks the signature first, then the age; the order only changes which
        // error a stale forgery gets.
        match self.tolerance {
            Some(tolerance) if now.saturating_sub(timestamp) > tolerance => {
                Err(VerifyError::TooOld {
                    timestamp,
                    tolerance,
                })
            }
            _ => Ok(()),
        }
    }

    fn github(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        let header = text(headers, HUB_SIGNATURE_256, "x-hub-signature-256")?;
        let candidate = header
            .strip_prefix("sha256=")
            .and_then(|h| hex::decode(h).ok())
            .ok_or(VerifyError::Malformed("x-hub-signature-256"))?;
        self.any_matches(&[candidate], &[body])
    }

    /// Whether any of `candidates` is the HMAC-SHA256 of `parts` under any of the secrets.
    fn any_matches(&self, candidates: &[Vec<u8>], parts: &[&[u8]]) -> Result<(), VerifyError> {
        for secret in &self.secrets {
            let mut mac = new_mac::<Hmac<Sha256>>(secret.key());
            for p in parts {
                mac.update(p);
            }
            if candidates
                .iter()
                .any(|c| mac.clone().verify_slice(c).is_ok())
            {
                return Ok(());
            }
        }
        Err(VerifyError::NoMatch)
    }
}

/// Header `name` as text, or which one is missing.
fn text<'h>(
    headers: &'h HeaderMap,
    name: http::HeaderName,
    shown: &'static str,
) -> Result<&'h str, VerifyError> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty())
        .ok_or(VerifyError::Missing(shown))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::sign::{Forgery, Message, Signer, STALE_MARGIN};

    const NOW: u64 = 1_700_000_000;

    fn message(b: &Bytes) -> Message<'_> {
        Message {
            id: "evt_abc",
            event_type: "invoice.paid",
            body: b,
        }
    }

    fn secret(style: Style) -> Secret {
        Secret::parse(style, "whsec_c2VjcmV0IGtleSBieXRlcw==").unwrap()
    }

    #[test]
    fn genuine_deliveries_verify_and_forged_ones_do_not() {
        let b = Bytes::from_static(br#"{"id":"evt_abc"}"#);
        for style in Style::ALL {
            let signer = Signer::new(style, secret(style));
            let verifier = Verifier::new(style, secret(style));
            let genuine = signer.sign(&message(&b), NOW).unwrap();
            assert_eq!(
                verifier.verify(&genuine.header_map(), &genuine.body, NOW),
                Ok(()),
                "{style}"
            );
            for &f in style.forgeries() {
                let d = signer.forge(&message(&b), NOW, f).unwrap();
                let got = verifier.verify(&d.header_map(), &d.body, NOW);
                let want = match (f, style) {
                    (Forgery::Signature | Forgery::Tampered | Forgery::Replayed, _) => {
                        VerifyError::NoMatch
                    }
                    (Forgery::Missing, Style::StandardWebhooks) => {
                        VerifyError::Missing("webhook-signature")
                    }
                    (Forgery::Missing, Style::Stripe) => VerifyError::Missing("stripe-signature"),
                    (Forgery::Missing, Style::Github) => {
                        VerifyError::Missing("x-hub-signature-256")
                    }
                    (Forgery::Stale, _) => VerifyError::TooOld {
                        timestamp: NOW - 300 - STALE_MARGIN,
                        tolerance: 300,
                    },
                };
                assert_eq!(got, Err(want), "{style} {f}");
            }
        }
    }

    #[test]
    fn without_a_tolerance_a_stale_delivery_passes_and_a_replayed_one_still_fails() {
        let b = Bytes::from_static(b"{}");
        for style in [Style::StandardWebhooks, Style::Stripe] {
            let signer = Signer::new(style, secret(style));
            let lax = Verifier::new(style, secret(style)).with_tolerance(None);
            let stale = signer.forge(&message(&b), NOW, Forgery::Stale).unwrap();
            assert_eq!(lax.verify(&stale.header_map(), &stale.body, NOW), Ok(()));
            let replayed = signer.forge(&message(&b), NOW, Forgery::Replayed).unwrap();
            assert_eq!(
                lax.verify(&replayed.header_map(), &replayed.body, NOW),
                Err(VerifyError::NoMatch)
            );
        }
    }

    #[test]
    fn standard_webhooks_refuses_the_future_and_stripe_does_not() {
        let b = Bytes::from_static(b"{}");
        let ahead = NOW + 301;
        let sw = Signer::new(Style::StandardWebhooks, secret(Style::StandardWebhooks))
            .sign(&message(&b), ahead)
            .unwrap();
        assert_eq!(
            Verifier::new(Style::StandardWebhooks, secret(Style::StandardWebhooks)).verify(
                &sw.header_map(),
                &sw.body,
                NOW
            ),
            Err(VerifyError::TooNew {
                timestamp: ahead,
                tolerance: 300
            })
        );
        let st = Signer::new(Style::Stripe, secret(Style::Stripe))
            .sign(&message(&b), ahead)
            .unwrap();
        assert_eq!(
            Verifier::new(Style::Stripe, secret(Style::Stripe)).verify(
                &st.header_map(),
                &st.body,
                NOW
            ),
            Ok(())
        );
        // Exactly at the tolerance is still in it.
        let edge = Signer::new(Style::StandardWebhooks, secret(Style::StandardWebhooks))
            .sign(&message(&b), NOW - 300)
            .unwrap();
        assert_eq!(
            Verifier::new(Style::StandardWebhooks, secret(Style::StandardWebhooks)).verify(
                &edge.header_map(),
                &edge.body,
                NOW
            ),
            Ok(())
        );
    }

    #[test]
    fn a_rotated_secret_verifies_either_way() {
        let b = Bytes::from_static(b"{}");
        let old = Secret::from_key(b"old key");
        let new = Secret::from_key(b"new key");
        for style in [Style::StandardWebhooks, Style::Stripe] {
            let d = Signer::new(style, new.clone())
                .also_signing_with(old.clone())
                .unwrap()
                .sign(&message(&b), NOW)
                .unwrap();
            for key in [&old, &new] {
                let v = Verifier::new(style, key.clone());
                assert_eq!(v.verify(&d.header_map(), &d.body, NOW), Ok(()), "{style}");
            }
            let v = Verifier::new(style, Secret::from_key(b"other")).also_accepting(old.clone());
            assert_eq!(v.verify(&d.header_map(), &d.body, NOW), Ok(()));
        }
    }

    #[test]
    fn malformed_headers_are_named() {
        let mut h = HeaderMap::new();
        h.insert(WEBHOOK_ID, "msg_1".parse().unwrap());
        h.insert(WEBHOOK_TIMESTAMP, "soon".parse().unwrap());
        h.insert(WEBHOOK_SIGNATURE, "v1,AAAA".parse().unwrap());
        let sw = Verifier::new(Style::StandardWebhooks, Secret::from_key(b"k"));
        assert_eq!(
            sw.verify(&h, b"{}", NOW),
            Err(VerifyError::Malformed("webhook-timestamp"))
        );
        let mut h = HeaderMap::new();
        h.insert(STRIPE_SIGNATURE, "v1=00".parse().unwrap());
        let st = Verifier::new(Style::Stripe, Secret::from_key(b"k"));
        assert_eq!(
            st.verify(&h, b"{}", NOW),
            Err(VerifyError::Malformed("stripe-signature"))
        );
        let mut h = HeaderMap::new();
        h.insert(HUB_SIGNATURE_256, "sha1=00".parse().unwrap());
        let gh = Verifier::new(Style::Github, Secret::from_key(b"k"));
        assert_eq!(
            gh.verify(&h, b"{}", NOW),
            Err(VerifyError::Malformed("x-hub-signature-256"))
        );
        assert_eq!(
            gh.verify(&HeaderMap::new(), b"{}", NOW)
                .unwrap_err()
                .to_string(),
            "missing header x-hub-signature-256"
        );
    }

    proptest::proptest! {
        /// Any body, any time: the genuine delivery verifies, and changing any one byte of the
        /// body makes it fail, in every style.
        #[test]
        fn any_body_verifies_and_any_changed_byte_fails(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..300),
            at in 0u64..4_000_000_000,
            pick in proptest::prelude::any::<proptest::sample::Index>(),
            xor in 1u8..=255,
        ) {
            let b = Bytes::from(body);
            for style in Style::ALL {
                let d = Signer::new(style, secret(style)).sign(&message(&b), at).unwrap();
                let v = Verifier::new(style, secret(style));
                proptest::prop_assert_eq!(v.verify(&d.header_map(), &d.body, at), Ok(()));
                let mut changed = d.body.to_vec();
                let i = pick.index(changed.len());
                changed[i] ^= xor;
                proptest::prop_assert_eq!(
                    v.verify(&d.header_map(), &changed, at),
                    Err(VerifyError::NoMatch)
                );
            }
        }
    }

    #[test]
    fn the_header_id_is_the_event_id_where_the_style_sends_one() {
        let b = Bytes::from_static(b"{}");
        for style in Style::ALL {
            let d = Signer::new(style, secret(style))
                .sign(&message(&b), NOW)
                .unwrap();
            let want = (style != Style::Stripe).then_some("evt_abc");
            assert_eq!(
                Verifier::new(style, secret(style)).header_id(&d.header_map()),
                want
            );
        }
    }
}

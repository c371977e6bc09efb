//! One delivery's headers and body, signed as the provider signs it — or forged on purpose.
//!
//! The signer is given the time (`at`, Unix seconds) instead of reading a clock: a delivery is a
//! function of its message, its secret and its time, so a test can make a delivery that is five
//! minutes old without waiting five minutes, and a redelivery is re-signed at its own time as
//! Stripe and Svix re-sign theirs.
//!
//! # Forgeries, per style
//!
//! Each [`Forgery`] is a delivery a correct consumer must refuse; which ones a style has follows
//! from what the style signs:
//!
//! | forgery | Standard Webhooks | Stripe | GitHub | what it is |
//! | --- | --- | --- | --- | --- |
//! | `signature` | yes | yes | yes | signed with a wrong secret |
//! | `missing` | yes | yes | yes | no signature header at all (a consumer that verifies only what is signed accepts it) |
//! | `tampered` | yes | yes | yes | the genuine signature, on a body that was changed after signing |
//! | `stale` | yes | yes | — | a genuine delivery made longer ago than the tolerance, replayed as it was: only the timestamp check refuses it |
//! | `replayed` | yes | yes | — | that earlier delivery's valid signature under a fresh timestamp: refused because the timestamp is part of what is signed |
//!
//! GitHub signs the body alone, with no time: a delivery replayed byte for byte verifies, and an
//! earlier delivery of the same event carries the very signature of this one. For GitHub a
//! replay is therefore not a forgery a signature can reveal; it is a duplicate, which the
//! consumer must absorb by its `X-GitHub-Delivery` (the `duplicates` chaos tests that).

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::Sha256;

use crate::{Secret, Style};

/// `webhook-id` (Standard Webhooks).
pub const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
/// `webhook-timestamp` (Standard Webhooks).
pub const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
/// `webhook-signature` (Standard Webhooks).
pub const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
/// `Stripe-Signature`.
pub const STRIPE_SIGNATURE: HeaderName = HeaderName::from_static("stripe-signature");
/// `X-GitHub-Delivery`: the delivery's GUID.
pub const GITHUB_DELIVERY: HeaderName = HeaderName::from_static("x-github-delivery");
/// `X-GitHub-Event`: the event's name.
pub const GITHUB_EVENT: HeaderName = HeaderName::from_static("x-github-event");
/// `X-GitHub-Hook-ID`: the webhook's id.
pub const GITHUB_HOOK_ID: HeaderName = HeaderName::from_static("x-github-hook-id");
/// `X-GitHub-Hook-Installation-Target-Type`.
pub const GITHUB_TARGET_TYPE: HeaderName =
    HeaderName::from_static("x-github-hook-installation-target-type");
/// `X-GitHub-Hook-Installation-Target-ID`.
pub const GITHUB_TARGET_ID: HeaderName =
    HeaderName::from_static("x-github-hook-installation-target-id");
/// `X-Hub-Signature-256: sha256=<hex>`.
pub const HUB_SIGNATURE_256: HeaderName = HeaderName::from_static("x-hub-signature-256");
/// `X-Hub-Signature: sha1=<hex>`, the legacy signature GitHub still sends beside the SHA-256 one.
pub const HUB_SIGNATURE: HeaderName = HeaderName::from_static("x-hub-signature");

/// How much older than the tolerance a `stale` delivery is: a minute, so that a verifier whose
/// clock is a little behind the sender's still finds it too old.
pub const STALE_MARGIN: u64 = 60;

/// A delivery made on purpose to be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Forgery {
    /// Signed with a wrong secret.
    Signature,
    /// No signature header.
    Missing,
    /// The genuine signature on a body changed after signing.
    Tampered,
    /// A genuine delivery older than the tolerance, replayed as it was (timestamped styles only).
    Stale,
    /// An earlier delivery's valid signature under a fresh timestamp (timestamped styles only).
    Replayed,
}

impl Forgery {
    /// Every forgery.
    pub const ALL: [Forgery; 5] = [
        Forgery::Signature,
        Forgery::Missing,
        Forgery::Tampered,
        Forgery::Stale,
        Forgery::Replayed,
    ];

    /// The forgery's name in reports and journals.
    pub fn name(self) -> &'static str {
        match self {
            Forgery::Signature => "signature",
            Forgery::Missing => "missing",
            Forgery::Tampered => "tampered",
            Forgery::Stale => "stale",
            Forgery::Replayed => "replayed",
        }
    }

    /// Whether `style` has this forgery (see the module's table).
    pub fn applies_to(self, style: Style) -> bool {
        match self {
            Forgery::Signature | Forgery::Missing | Forgery::Tampered => true,
            Forgery::Stale | Forgery::Replayed => style.tolerance().is_some(),
        }
    }
}

impl fmt::Display for Forgery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Forgery {
    type Err = String;

    fn from_str(s: &str) -> Result<Forgery, String> {
        Forgery::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown forgery {s:?} (expected signature, missing, tampered, stale or replayed)"
                )
            })
    }
}

impl Style {
    /// The forgeries this style has, in [`Forgery::ALL`]'s order.
    pub fn forgeries(self) -> &'static [Forgery] {
        const TIMESTAMPED: &[Forgery] = &Forgery::ALL;
        const UNTIMED: &[Forgery] = &[Forgery::Signature, Forgery::Missing, Forgery::Tampered];
        match self.tolerance() {
            Some(_) => TIMESTAMPED,
            None => UNTIMED,
        }
    }
}

/// What is signed: one event's id, type and body.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The event's id: `webhook-id` for Standard Webhooks, `X-GitHub-Delivery` for GitHub (Stripe
    /// carries it in the body only).
    pub id: &'a str,
    /// The event's type, such as `invoice.paid`; GitHub's `X-GitHub-Event` is its part before the
    /// first dot (`invoice`), the rest being what GitHub calls the action.
    pub event_type: &'a str,
    /// The body, exactly as sent.
    pub body: &'a Bytes,
}

/// One delivery as it goes on the wire: its headers and its body.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Every header the provider sends, in a stable order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body.
    pub body: Bytes,
    /// The timestamp the delivery carries (Standard Webhooks and Stripe).
    pub timestamp: Option<u64>,
    /// The time its signature was made for: the timestamp, except for a `replayed` delivery.
    pub signed_at: Option<u64>,
    /// What was forged, if anything.
    pub forged: Option<Forgery>,
}

impl Delivery {
    /// The value of header `name` (any case), if it is there and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.to_str().ok())
    }

    /// The headers as a map, as a server receives them.
    pub fn header_map(&self) -> HeaderMap {
        self.headers.iter().cloned().collect()
    }
}

/// Why a delivery could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The id or the type cannot go in a header.
    #[error("the event's {what} {value:?} cannot be sent in a header (only visible ASCII)")]
    Header {
        /// `id` or `type`.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// The style has no such forgery.
    #[error("{style} deliveries have no {forgery} forgery: GitHub signs no timestamp")]
    NotApplicable {
        /// The style.
        style: Style,
        /// The forgery.
        forgery: Forgery,
    },
    /// GitHub signs with one secret.
    #[error(
        "github signs with one secret; several are for standard-webhooks and stripe key rotation"
    )]
    OneSecret,
}

/// Signs deliveries for one style with one secret (or several, while a key is rotated).
#[derive(Debug, Clone)]
pub struct Signer {
    style: Style,
    secrets: Vec<Secret>,
    tolerance: u64,
    hook_id: u64,
}

/// GitHub's user agent names the build that sent; a fixed one here.
const GITHUB_USER_AGENT: &str = "GitHub-Hookshot/7d0e1c5";
/// Stripe's user agent on its webhook requests.
const STRIPE_USER_AGENT: &str = "Stripe/1.0 (+https://stripe.com/docs/webhooks)";
/// The user agent of Standard Webhooks deliveries, for which the specification names none.
const SENDER_USER_AGENT: &str = concat!("harness-webhooks/", env!("CARGO_PKG_VERSION"));

impl Signer {
    /// A signer for `style` with `secret`.
    pub fn new(style: Style, secret: Secret) -> Signer {
        Signer {
            style,
            secrets: vec![secret],
            tolerance: style.tolerance().unwrap_or(0),
            hook_id: 1,
        }
    }

    /// Also signs with `other`, as a provider does while a secret is rotated: one more
    /// space-separated `v1,…` (Standard Webhooks) or `v1=…` (Stripe) per secret.
    pub fn also_signing_with(mut self, other: Secret) -> Result<Signer, SignError> {
        if self.style == Style::Github {
            return Err(SignError::OneSecret);
        }
        self.secrets.push(other);
        Ok(self)
    }

    /// The tolerance the consumer is expected to enforce, in seconds (the style's by default):
    /// a `stale` delivery is older than it by [`STALE_MARGIN`].
    pub fn with_tolerance(mut self, secs: u64) -> Signer {
        self.tolerance = secs;
        self
    }

    /// The id sent as `X-GitHub-Hook-ID` (1 by default).
    pub fn with_hook_id(mut self, id: u64) -> Signer {
        self.hook_id = id;
        self
    }

    /// The style.
    pub fn style(&self) -> Style {
        self.style
    }

    /// How long before `at` a `stale` delivery, and the earlier delivery a `replayed` one takes
    /// its signature from, were signed.
    pub fn stale_age(&self) -> u64 {
        self.tolerance + STALE_MARGIN
    }

    /// The genuine delivery of `msg` at `at` (Unix seconds).
    pub fn sign(&self, msg: &Message<'_>, at: u64) -> Result<Delivery, SignError> {
        self.build(msg, msg.body, at, at, &self.secrets, true, None)
    }

    /// A delivery of `msg` at `at` forged as `forgery` says (see the module's table).
    pub fn forge(
        &self,
        msg: &Message<'_>,
        at: u64,
        forgery: Forgery,
    ) -> Result<Delivery, SignError> {
        if !forgery.applies_to(self.style) {
            return Err(SignError::NotApplicable {
                style: self.style,
                forgery,
            });
        }
        let earlier = at.saturating_sub(self.stale_age());
        let f = Some(forgery);
        match forgery {
            Forgery::Signature => {
                let wrong: Vec<Secret> = self.secrets.iter().map(Secret::wrong).collect();
                self.build(msg, msg.body, at, at, &wrong, true, f)
            }
            Forgery::Missing => self.build(msg, msg.body, at, at, &self.secrets, false, f),
            Forgery::Tampered => {
                let mut d = self.build(msg, msg.body, at, at, &self.secrets, true, f)?;
                d.body = tamper(msg.body);
                Ok(d)
            }
            Forgery::Stale => self.build(msg, msg.body, earlier, earlier, &self.secrets, true, f),
            Forgery::Replayed => self.build(msg, msg.body, at, earlier, &self.secrets, true, f),
        }
    }

    /// The delivery of `body`, carrying timestamp `at` and signed (when `signed`) for
    /// `signed_at` with `secrets`.
    #[allow(clippy::too_many_arguments)]
    fn build(
        &self,
        msg: &Message<'_>,
        body: &Bytes,
        at: u64,
        signed_at: u64,
        secrets: &[Secret],
        signed: bool,
        forged: Option<Forgery>,
    ) -> Result<Delivery, SignError> {
        let mut headers = Vec::with_capacity(8);
        let timestamped = self.style.tolerance().is_some();
        match self.style {
            Style::StandardWebhooks => {
                headers.push((http::header::CONTENT_TYPE, json()));
                headers.push((http::header::USER_AGENT, fixed(SENDER_USER_AGENT)));
                headers.push((WEBHOOK_ID, value("id", msg.id)?));
                headers.push((WEBHOOK_TIMESTAMP, number(at)));
                if signed {
                    let stamp = signed_at.to_string();
                    let mut sig = String::with_capacity(secrets.len() * 48);
                    for s in secrets {
                        if !sig.is_empty() {
                            sig.push(' ');
                        }
                        let mac = hmac_sha256(
                            s.key(),
                            &[msg.id.as_bytes(), b".", stamp.as_bytes(), b".", body],
                        );
                        sig.push_str("v1,");
                        base64::engine::general_purpose::STANDARD.encode_string(mac, &mut sig);
                    }
                    headers.push((WEBHOOK_SIGNATURE, owned(sig)));
                }
            }
            Style::Stripe => {
                headers.push((
                    http::header::CONTENT_TYPE,
                    fixed("application/json; charset=utf-8"),
                ));
                headers.push((http::header::USER_AGENT, fixed(STRIPE_USER_AGENT)));
                if signed {
                    let stamp = signed_at.to_string();
                    let mut sig = format!("t={at}");
                    for s in secrets {
                        let mac = hmac_sha256(s.key(), &[stamp.as_bytes(), b".", body]);
                        sig.push_str(",v1=");
                        sig.push_str(&hex::encode(mac));
                    }
                    headers.push((STRIPE_SIGNATURE, owned(sig)));
                }
            }
            Style::Github => {
                headers.push((http::header::CONTENT_TYPE, json()));
                headers.push((http::header::USER_AGENT, fixed(GITHUB_USER_AGENT)));
                headers.push((GITHUB_DELIVERY, value("id", msg.id)?));
                let event = msg.event_type.split('.').next().unwrap_or(msg.event_type);
                headers.push((GITHUB_EVENT, value("type", event)?));
                headers.push((GITHUB_HOOK_ID, number(self.hook_id)));
                headers.push((GITHUB_TARGET_TYPE, fixed("repository")));
                headers.push((GITHUB_TARGET_ID, number(self.hook_id)));
                if signed {
                    // One secret: `also_signing_with` refuses a second for GitHub.
                    if let Some(s) = secrets.first() {
                        let sha1 = hmac_sha1(s.key(), body);
                        headers.push((HUB_SIGNATURE, owned(format!("sha1={}", hex::encode(sha1)))));
                        let sha256 = hmac_sha256(s.key(), &[body]);
                        headers.push((
                            HUB_SIGNATURE_256,
                            owned(format!("sha256={}", hex::encode(sha256))),
                        ));
                    }
                }
            }
        }
        Ok(Delivery {
            headers,
            body: body.clone(),
            timestamp: timestamped.then_some(at),
            signed_at: (timestamped && signed).then_some(signed_at),
            forged,
        })
    }
}

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = new_mac::<Hmac<Sha256>>(key);
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA1 of `body` under `key` (GitHub's legacy `X-Hub-Signature`).
fn hmac_sha1(key: &[u8], body: &[u8]) -> [u8; 20] {
    let mut mac = new_mac::<Hmac<sha1::Sha1>>(key);
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// An HMAC keyed with `key`. HMAC takes a key of any length (a long one is hashed first), so
/// `new_from_slice` cannot fail for it; the zero-length fallback is never taken.
pub(crate) fn new_mac<M: KeyInit>(key: &[u8]) -> M {
    M::new_from_slice(key).unwrap_or_else(|_| M::new(&Default::default()))
}

/// `body` changed after it was signed: a JSON object gains `"tampered": true` (its id and every
/// other field kept, so a consumer that accepts it takes an effect for the event); anything
/// else gains a trailing space.
fn tamper(body: &Bytes) -> Bytes {
    if let Ok(serde_json::Value::Object(mut o)) = serde_json::from_slice(body) {
        o.insert("tampered".into(), serde_json::Value::Bool(true));
        if let Ok(v) = serde_json::to_vec(&o) {
            return Bytes::from(v);
        }
    }
    let mut v = body.to_vec();
    v.push(b' ');
    Bytes::from(v)
}

fn json() -> HeaderValue {
    HeaderValue::from_static("application/json")
}

fn fixed(s: &'static str) -> HeaderValue {
    HeaderValue::from_static(s)
}

fn number(n: u64) -> HeaderValue {
    HeaderValue::from(n)
}

/// A header value made of text this module wrote (base64, hex, digits): always valid.
fn owned(s: String) -> HeaderValue {
    HeaderValue::from_maybe_shared(Bytes::from(s)).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A header value from the event's `what` (its id or type), which may be anything.
fn value(what: &'static str, s: &str) -> Result<HeaderValue, SignError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SignError::Header {
            what,
            value: s.to_string(),
        });
    }
    HeaderValue::from_str(s).map_err(|_| SignError::Header {
        what,
        value: s.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn standard_webhooks_matches_the_specifications_example() {
        // The example of the Standard Webhooks specification (and of its libraries' tests):
        // secret, id, timestamp and body, and the signature they give.
        let secret = Secret::parse(
            Style::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .unwrap();
        let b = body(r#"{"test": 2432232314}"#);
        let msg = Message {
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
            event_type: "test",
            body: &b,
        };
        let d = Signer::new(Style::StandardWebhooks, secret)
            .sign(&msg, 1614265330)
            .unwrap();
        assert_eq!(
            d.header("webhook-signature"),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
        assert_eq!(d.header("webhook-id"), Some("msg_p5jXN8AQM9LWM0D4loKWxJek"));
        assert_eq!(d.header("webhook-timestamp"), Some("1614265330"));
        assert_eq!(d.header("content-type"), Some("application/json"));
        assert_eq!(d.body, b);
        assert_eq!(
            (d.timestamp, d.signed_at, d.forged),
            (Some(1614265330), Some(1614265330), None)
        );
    }

    #[test]
    fn github_matches_its_documented_example() {
        // GitHub's "Validating webhook deliveries": secret "It's a Secret to Everybody", payload
        // "Hello, World!", signature 757107ea….
        let secret = Secret::parse(Style::Github, "It's a Secret to Everybody").unwrap();
        let b = body("Hello, World!");
        let msg = Message {
            id: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            event_type: "issues.opened",
            body: &b,
        };
        let d = Signer::new(Style::Github, secret).sign(&msg, 0).unwrap();
        assert_eq!(
            d.header("x-hub-signature-256"),
            Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
        );
        assert_eq!(d.header("X-GitHub-Event"), Some("issues"));
        assert_eq!(
            d.header("X-GitHub-Delivery"),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        assert!(d
            .header("user-agent")
            .unwrap()
            .starts_with("GitHub-Hookshot/"));
        assert!(d.header("x-hub-signature").unwrap().starts_with("sha1="));
        assert_eq!((d.timestamp, d.signed_at), (None, None));
    }

    #[test]
    fn stripe_signs_the_timestamp_and_the_body() {
        let secret = Secret::parse(Style::Stripe, "whsec_test").unwrap();
        let b = body(r#"{"id":"evt_1"}"#);
        let msg = Message {
            id: "evt_1",
            event_type: "invoice.paid",
            body: &b,
        };
        let d = Signer::new(Style::Stripe, secret.clone())
            .sign(&msg, 1700000000)
            .unwrap();
        let expected = hex::encode(hmac_sha256(
            b"whsec_test",
            &[b"1700000000.", br#"{"id":"evt_1"}"#],
        ));
        assert_eq!(
            d.header("stripe-signature"),
            Some(format!("t=1700000000,v1={expected}").as_str())
        );
        // Stripe carries the id in the body only.
        assert_eq!(d.header("webhook-id"), None);
    }

    #[test]
    fn rotation_adds_one_signature_per_secret() {
        let a = Secret::from_key(b"first key bytes");
        let b = Secret::from_key(b"second key bytes");
        let bd = body("{}");
        let msg = Message {
            id: "msg_1",
            event_type: "t",
            body: &bd,
        };
        let sw = Signer::new(Style::StandardWebhooks, a.clone())
            .also_signing_with(b.clone())
            .unwrap()
            .sign(&msg, 5)
            .unwrap();
        let sig = sw.header("webhook-signature").unwrap();
        assert_eq!(sig.split(' ').count(), 2, "{sig}");
        assert!(sig.split(' ').all(|s| s.starts_with("v1,")));
        let st = Signer::new(Style::Stripe, a.clone())
            .also_signing_with(b.clone())
            .unwrap()
            .sign(&msg, 5)
            .unwrap();
        assert_eq!(
            st.header("stripe-signature")
                .unwrap()
                .matches(",v1=")
                .count(),
            2
        );
        assert_eq!(
            Signer::new(Style::Github, a)
                .also_signing_with(b)
                .unwrap_err(),
            SignError::OneSecret
        );
    }

    #[test]
    fn forgeries_differ_from_the_genuine_delivery_where_they_should() {
        let b = body(r#"{"id":"evt_9","type":"invoice.paid"}"#);
        let msg = Message {
            id: "evt_9",
            event_type: "invoice.paid",
            body: &b,
        };
        for style in Style::ALL {
            let signer = Signer::new(style, Secret::from_key(b"k3y"));
            let genuine = signer.sign(&msg, 10_000).unwrap();
            let sig_header = match style {
                Style::StandardWebhooks => "webhook-signature",
                Style::Stripe => "stripe-signature",
                Style::Github => "x-hub-signature-256",
            };
            for &f in style.forgeries() {
                let d = signer.forge(&msg, 10_000, f).unwrap();
                assert_eq!(d.forged, Some(f));
                match f {
                    Forgery::Signature => {
                        assert_ne!(d.header(sig_header), genuine.header(sig_header));
                        assert_eq!(d.body, genuine.body);
                    }
                    Forgery::Missing => {
                        assert_eq!(d.header(sig_header), None, "{style}");
                        assert_eq!(d.header("x-hub-signature"), None);
                    }
                    Forgery::Tampered => {
                        assert_eq!(d.header(sig_header), genuine.header(sig_header));
                        assert_ne!(d.body, genuine.body);
                        let v: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
                        assert_eq!(
                            (v["id"].as_str(), v["tampered"].as_bool()),
                            (Some("evt_9"), Some(true))
                        );
                    }
                    Forgery::Stale => {
                        let old = 10_000 - 300 - STALE_MARGIN;
                        assert_eq!((d.timestamp, d.signed_at), (Some(old), Some(old)));
                        assert_eq!(
                            d,
                            Delivery {
                                forged: Some(f),
                                ..signer.sign(&msg, old).unwrap()
                            }
                        );
                    }
                    Forgery::Replayed => {
                        let old = 10_000 - 300 - STALE_MARGIN;
                        assert_eq!((d.timestamp, d.signed_at), (Some(10_000), Some(old)));
                        let earlier = signer.sign(&msg, old).unwrap();
                        let sig = |d: &Delivery| match style {
                            Style::Stripe => d
                                .header(sig_header)
                                .unwrap()
                                .split_once(",v1=")
                                .unwrap()
                                .1
                                .to_string(),
                            _ => d.header(sig_header).unwrap().to_string(),
                        };
                        assert_eq!(sig(&d), sig(&earlier));
                        assert_ne!(sig(&d), sig(&genuine));
                    }
                }
            }
        }
    }

    #[test]
    fn github_has_no_timestamp_forgeries() {
        assert_eq!(
            Style::Github.forgeries(),
            [Forgery::Signature, Forgery::Missing, Forgery::Tampered]
        );
        let b = body("{}");
        let msg = Message {
            id: "x",
            event_type: "t",
            body: &b,
        };
        let e = Signer::new(Style::Github, Secret::from_key(b"k"))
            .forge(&msg, 100, Forgery::Stale)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "github deliveries have no stale forgery: GitHub signs no timestamp"
        );
        assert_eq!("replayed".parse::<Forgery>(), Ok(Forgery::Replayed));
        assert!("forged".parse::<Forgery>().is_err());
    }

    #[test]
    fn an_id_that_cannot_be_a_header_is_refused() {
        let b = body("{}");
        let msg = Message {
            id: "evt\r\nx-injected: 1",
            event_type: "t",
            body: &b,
        };
        let e = Signer::new(Style::StandardWebhooks, Secret::from_key(b"k"))
            .sign(&msg, 1)
            .unwrap_err();
        assert!(matches!(e, SignError::Header { what: "id", .. }), "{e}");
        let non_json = tamper(&body("plain"));
        assert_eq!(&non_json[..], b"plain ");
    }
}

//! A signing secret, read as its provider reads it.
//!
//! The providers disagree on what the text of a secret *is*: Standard Webhooks' `whsec_…` is a
//! prefix and a base64 key (the libraries strip the prefix and decode the rest), while Stripe's
//! `whsec_…` and GitHub's secret are used as their own UTF-8 bytes. Reading a Standard Webhooks
//! secret Stripe's way gives a signature no Standard Webhooks library accepts, so the style is
//! part of reading it. A secret never appears in a message or a `Debug` output.

use std::fmt;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, Engine};

use crate::Style;

/// The prefix Standard Webhooks (and Stripe, by convention) put in front of a secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// Standard base64, with or without its padding: the libraries add `==` before decoding, so both
/// forms are in use.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// An HMAC key, read from a secret's text for one style.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

/// A secret's text that its style cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The secret is empty (after its `whsec_` prefix, for Standard Webhooks).
    #[error("the {0} secret is empty")]
    Empty(Style),
    /// A Standard Webhooks secret whose part after `whsec_` is not base64.
    #[error("a standard-webhooks secret is `whsec_` followed by the key in base64; this one's key is not base64 ({0})")]
    NotBase64(String),
}

impl Secret {
    /// Reads `text` as `style` does: for Standard Webhooks an optional `whsec_` prefix and a
    /// base64 key; for Stripe and GitHub the text's own bytes.
    pub fn parse(style: Style, text: &str) -> Result<Secret, SecretError> {
        let key = match style {
            Style::StandardWebhooks => {
                let encoded = text.strip_prefix(SECRET_PREFIX).unwrap_or(text);
                LENIENT
                    .decode(encoded)
                    .map_err(|e| SecretError::NotBase64(e.to_string()))?
            }
            Style::Stripe | Style::Github => text.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err(SecretError::Empty(style));
        }
        Ok(Secret { key })
    }

    /// A secret with this raw key.
    pub fn from_key(key: &[u8]) -> Secret {
        Secret { key: key.to_vec() }
    }

    /// The HMAC key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// A key that is certainly not this one (every byte changed), for a signature made with the
    /// wrong secret.
    pub(crate) fn wrong(&self) -> Secret {
        Secret {
            key: self.key.iter().map(|b| b ^ 0x5a).collect(),
        }
    }

    /// The Standard Webhooks text of a raw key: `whsec_` and its base64.
    pub fn standard_webhooks_text(key: &[u8]) -> String {
        format!(
            "{SECRET_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        )
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.key.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_webhooks_secrets_are_base64_after_their_prefix() {
        // The Standard Webhooks specification's example secret.
        let s = Secret::parse(
            Style::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .unwrap();
        assert_eq!(s.key().len(), 24);
        // Without the prefix, and without padding, as the libraries accept.
        let bare =
            Secret::parse(Style::StandardWebhooks, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(bare, s);
        let unpadded = Secret::parse(Style::StandardWebhooks, "whsec_AAE").unwrap();
        assert_eq!(unpadded.key(), [0, 1]);
        assert_eq!(
            Secret::standard_webhooks_text(s.key()),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        );
    }

    #[test]
    fn stripe_and_github_secrets_are_their_own_bytes() {
        let s = Secret::parse(Style::Stripe, "whsec_test_secret").unwrap();
        assert_eq!(s.key(), b"whsec_test_secret");
        let g = Secret::parse(Style::Github, "It's a Secret to Everybody").unwrap();
        assert_eq!(g.key(), b"It's a Secret to Everybody");
    }

    #[test]
    fn unusable_secrets_get_one_clear_message() {
        assert_eq!(
            Secret::parse(Style::Github, "").unwrap_err().to_string(),
            "the github secret is empty"
        );
        assert_eq!(
            Secret::parse(Style::StandardWebhooks, "whsec_")
                .unwrap_err()
                .to_string(),
            "the standard-webhooks secret is empty"
        );
        let e = Secret::parse(Style::StandardWebhooks, "whsec_not base64!")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("a standard-webhooks secret is `whsec_` followed by the key in base64"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_is_never_printed() {
        let s = Secret::parse(Style::Stripe, "whsec_very_secret").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(17 bytes)");
        assert_ne!(s.wrong(), s);
        assert_eq!(s.wrong().key().len(), s.key().len());
    }
}

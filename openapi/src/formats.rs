//! Values for the string formats of JSON Schema and the OpenAPI format registry, made from the
//! caller's random source so they are reproducible. Hosts and addresses are the ones reserved for
//! documentation (example.com, 192.0.2.0/24, 2001:db8::/32): a generated request never names a
//! real third party.

use rand::rngs::ChaCha8Rng;
use rand::RngExt;

const WORDS: &[&str] = &[
    "alpha", "bravo", "cedar", "delta", "ember", "flint", "grove", "harbor", "iris", "juniper",
    "kestrel", "linden", "maple", "nova", "orchid", "pine",
];

fn word(rng: &mut ChaCha8Rng) -> &'static str {
    WORDS[rng.random_range(0..WORDS.len())]
}

/// A value of `format`, or None for a format not known here (the caller makes a plain string).
pub(crate) fn generate(format: &str, rng: &mut ChaCha8Rng) -> Option<String> {
    let date = |rng: &mut ChaCha8Rng| {
        format!(
            "{:04}-{:02}-{:02}",
            rng.random_range(2000..=2030),
            rng.random_range(1..=12),
            rng.random_range(1..=28)
        )
    };
    let time = |rng: &mut ChaCha8Rng| {
        format!(
            "{:02}:{:02}:{:02}Z",
            rng.random_range(0..24),
            rng.random_range(0..60),
            rng.random_range(0..60)
        )
    };
    Some(match format {
        "uuid" => {
            let bytes: [u8; 16] = rng.random();
            uuid::Builder::from_random_bytes(bytes)
                .into_uuid()
                .to_string()
        }
        "date-time" => format!("{}T{}", date(rng), time(rng)),
        "date" => date(rng),
        "time" => time(rng),
        "duration" => format!("P{}DT{}H", rng.random_range(1..30), rng.random_range(0..24)),
        "email" | "idn-email" => format!("{}{}@example.com", word(rng), rng.random_range(1..1000)),
        "uri" | "url" | "iri" => format!(
            "https://example.com/{}/{}",
            word(rng),
            rng.random_range(1..1000)
        ),
        "uri-reference" | "iri-reference" => {
            format!("/{}/{}", word(rng), rng.random_range(1..1000))
        }
        "uri-template" => format!("https://example.com/{}/{{id}}", word(rng)),
        "hostname" | "idn-hostname" => format!("{}.example.com", word(rng)),
        "ipv4" => format!("192.0.2.{}", rng.random_range(1..255)),
        "ipv6" => format!("2001:db8::{:x}", rng.random_range(1..0xffff)),
        "json-pointer" => format!("/{}/{}", word(rng), rng.random_range(0..10)),
        "relative-json-pointer" => format!("{}/{}", rng.random_range(0..3), word(rng)),
        "regex" => "^[a-z]+$".to_string(),
        "byte" => {
            let n = rng.random_range(6..18);
            let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            data_encoding::BASE64.encode(&bytes)
        }
        "binary" | "password" => format!("{}{}", word(rng), rng.random_range(100..1000)),
        "int32" | "int64" => rng.random_range(1..10_000).to_string(),
        "float" | "double" | "decimal" => format!(
            "{}.{:02}",
            rng.random_range(0..1000),
            rng.random_range(0..100)
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use serde_json::json;

    /// Each format's value is judged by jsonschema's own format checks (2020-12, formats asserted).
    #[test]
    fn every_format_passes_the_validator_format_check() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for format in [
            "uuid",
            "date-time",
            "date",
            "time",
            "duration",
            "email",
            "idn-email",
            "uri",
            "iri",
            "uri-reference",
            "iri-reference",
            "uri-template",
            "hostname",
            "idn-hostname",
            "ipv4",
            "ipv6",
            "json-pointer",
            "relative-json-pointer",
            "regex",
        ] {
            let v = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .should_validate_formats(true)
                .build(&json!({"type": "string", "format": format}))
                .unwrap();
            for _ in 0..20 {
                let s = generate(format, &mut rng).unwrap();
                assert!(v.is_valid(&json!(s)), "{format}: {s}");
            }
        }
        let s = generate("byte", &mut rng).unwrap();
        assert!(data_encoding::BASE64.decode(s.as_bytes()).is_ok(), "{s}");
        assert_eq!(generate("no-such-format", &mut rng), None);
    }
}

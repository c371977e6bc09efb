"""Verifies deliveries made by the `webhooks` crate with the providers' own Python libraries.

    python verify.py CASES.json

CASES.json is a list of deliveries, each {"case", "style", "secret", "headers", "body",
"signed_at"} (written by webhooks/tests/libraries.rs). For every delivery and every library of
its style this prints one JSON line:

    {"library": ..., "case": ..., "verified": true|false, "error": ...,
     "lax": true|false|null, "library_signature": true|false|null}

- `verified`: the library's own verification with its defaults (tolerance included) accepted it;
- `lax`: the library accepted it with the timestamp check turned off, where the library has
  such a switch (stripe's `tolerance=0`), else null;
- `library_signature`: the delivery's signature is the one the library itself computes for the
  body at `signed_at` (the time the signature claims to be from), so a stale or replayed
  delivery is shown to carry a real signature of an earlier delivery; null without `signed_at`.

The libraries: `standardwebhooks` and `svix` (Standard Webhooks), `stripe` (Stripe). GitHub
publishes no Python verifier; its deliveries are verified by verify.mjs with @octokit.
"""

import json
import sys
from datetime import datetime, timezone


def lower(headers):
    return {k.lower(): v for k, v in headers.items()}


def standard_webhooks(library, webhook_class, case):
    headers = lower(case["headers"])
    out = {"library": library, "case": case["case"], "lax": None, "library_signature": None}
    try:
        webhook_class(case["secret"]).verify(case["body"], headers)
        out.update(verified=True, error=None)
    except Exception as e:  # the libraries raise their own error types, and ValueError on bad base64
        out.update(verified=False, error=f"{type(e).__name__}: {e}")
    if case.get("signed_at") is not None and "webhook-signature" in headers:
        at = datetime.fromtimestamp(case["signed_at"], tz=timezone.utc)
        own = webhook_class(case["secret"]).sign(headers["webhook-id"], at, case["body"])
        out["library_signature"] = own in headers["webhook-signature"].split(" ")
    return out


def stripe_library(case):
    import stripe

    headers = lower(case["headers"])
    out = {"library": "stripe (PyPI)", "case": case["case"], "lax": None, "library_signature": None}
    sig = headers.get("stripe-signature", "")
    try:
        stripe.Webhook.construct_event(case["body"], sig, case["secret"])
        out.update(verified=True, error=None)
    except Exception as e:  # SignatureVerificationError, or ValueError on a bad payload
        out.update(verified=False, error=f"{type(e).__name__}: {e}")
    try:
        # tolerance=0 turns the age check off (`if tolerance and timestamp < now - tolerance`).
        stripe.Webhook.construct_event(case["body"], sig, case["secret"], tolerance=0)
        out["lax"] = True
    except Exception:
        out["lax"] = False
    if case.get("signed_at") is not None and sig:
        own = stripe.WebhookSignature.generate_signature_header(
            case["body"], case["secret"], timestamp=case["signed_at"]
        )
        own_v1 = own.split(",v1=", 1)[1]
        theirs = [p.split("=", 1)[1] for p in sig.split(",") if p.startswith("v1=")]
        out["library_signature"] = own_v1 in theirs
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    for case in cases:
        results = []
        if case["style"] == "standard-webhooks":
            import standardwebhooks
            import svix.webhooks

            results.append(standard_webhooks("standardwebhooks (PyPI)", standardwebhooks.Webhook, case))
            results.append(standard_webhooks("svix (PyPI)", svix.webhooks.Webhook, case))
        elif case["style"] == "stripe":
            results.append(stripe_library(case))
        for r in results:
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

//! `harness deliver URL`: a deliver phase from flags alone.
//!
//! The flags are written into the same scenario a file would hold — one `deliver` phase at the
//! URL, the five delivery checks — and resolved by [`crate::scenario::resolve`], so a value is
//! checked in one place whichever way it came. Only the messages differ: an error the resolver
//! places at a scenario field names the flag that set it.

use std::collections::BTreeMap;
use std::path::Path;

use checks::duplicates::VerifyConfig;
use checks::{
    AckLatencyConfig, ChecksConfig, DuplicateAckConfig, EffectsOnceConfig, ForgedRejectedConfig,
    OrderingConfig, StateConfig,
};
use clap::Args;
use yaml_config::{ConfigError, Dur};

use reports::Outcome;

use super::args::{ConnectArgs, Output, SyncArg};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;
use crate::plan::{Plan, SyncMode};
use crate::scenario::{DeliverFile, Overrides, PhaseFile, RequestFile, ScenarioFile};

/// What messages call a plan made from flags.
const ORIGIN: &str = "harness deliver";

/// `harness deliver` flags.
#[derive(Debug, Args)]
pub struct DeliverArgs {
    /// The consumer's webhook endpoint, e.g. http://127.0.0.1:8000/webhook.
    pub url: String,
    /// How deliveries are signed: standard-webhooks, stripe or github.
    #[arg(long, value_name = "STYLE")]
    pub style: String,
    /// The signing secret, as the provider shows it (`whsec_…` for Standard Webhooks and Stripe).
    #[arg(
        long,
        value_name = "SECRET",
        env = "HARNESS_WEBHOOK_SECRET",
        hide_env_values = true
    )]
    pub secret: String,
    /// How many events [default: 100].
    #[arg(long, value_name = "N")]
    pub events: Option<u64>,
    /// Each subject's event types in their logical order, comma-separated [default:
    /// invoice.created,invoice.paid].
    #[arg(long, value_name = "TYPES", value_delimiter = ',')]
    pub types: Vec<String>,
    /// The JSON payload template, with {{event_id}}, {{subject}}, {{type}}, {{seq}} [default:
    /// Stripe's event shape, the event id as `id`].
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
    /// Deliveries in flight at once: workers, each delivering one subject at a time [default:
    /// 10].
    #[arg(short = 'c', long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// The share of events delivered more than once (0..1).
    #[arg(long, value_name = "F")]
    pub duplicates: Option<f64>,
    /// How many copies a duplicated event gets [default: 2].
    #[arg(long, value_name = "N")]
    pub copies: Option<u32>,
    /// How the copies go: `mixed` (each copy after the first goes together with it or after it
    /// was answered, half each, drawn from --seed and the event), `together` (one burst, released
    /// as --sync says) or a duration after each answer [default: mixed].
    #[arg(long, value_name = "SPACING")]
    pub spacing: Option<String>,
    /// How copies sent together are released [default: release over HTTP/1.1, single-packet
    /// over HTTP/2].
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) sync: Option<SyncArg>,
    /// The share of subjects whose events go last first (0..1).
    #[arg(long, value_name = "F")]
    pub reorder: Option<f64>,
    /// The share of events preceded by a forged delivery (0..1): a wrong signature, none, a
    /// tampered body, a stale timestamp, a replayed signature.
    #[arg(long, value_name = "F")]
    pub forged: Option<f64>,
    /// The share of copies whose first answer is dropped unread, then redelivered (0..1).
    #[arg(long = "lost-ack", value_name = "F")]
    pub lost_ack: Option<f64>,
    /// How long the provider waits for an answer [default: the style's, 15s or 10s]; also
    /// `ack_latency`'s limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    pub timeout: Option<Dur>,
    /// When a failed delivery is due again: none, provider, WAIT,WAIT,… or
    /// exp:FIRST:FACTOR:WITHIN [default: 1s,2s,4s].
    #[arg(long, value_name = "SCHEDULE")]
    pub redeliver: Option<String>,
    /// The timestamp tolerance the consumer enforces; stale forgeries are older [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    pub tolerance: Option<Dur>,
    /// URL (or path on the consumer) with {event_id}, answering JSON with the number of
    /// effects the event took: `effects_once`, and `forged_rejected`'s effects.
    #[arg(long, value_name = "URL")]
    pub verify: Option<String>,
    /// The JSON field of --verify's answer holding the count.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "count",
        requires = "verify"
    )]
    pub count_field: String,
    /// URL (or path on the consumer) with {subject}, answering JSON with the state a subject
    /// ended in (404: none): `ordering`.
    #[arg(long, value_name = "URL")]
    pub verify_state: Option<String>,
    /// The JSON field of --verify-state's answer holding the state (an event type).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "type",
        requires = "verify_state"
    )]
    pub state_field: String,
    /// A 409 or 5xx answer to a duplicate makes `duplicate_ack` weak instead of failed.
    #[arg(long)]
    pub weak_duplicate_ack: bool,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Seed of the chaos (which events are duplicated, forged, reversed); event ids are new in
    /// every run.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Multiply every duration (the timeout, the redelivery waits, the spacing).
    #[arg(long, value_name = "F")]
    pub time_scale: Option<f64>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(flatten)]
    pub(crate) dashboard: super::args::DashboardArgs,
}

fn parse_dur(s: &str) -> Result<Dur, String> {
    yaml_config::parse_duration(s).map(Dur)
}

impl DeliverArgs {
    /// The scenario the flags describe.
    fn scenario(&self) -> Result<ScenarioFile, String> {
        let (origin, path) = split_url(&self.url)?;
        let mut headers = BTreeMap::new();
        for h in &self.headers {
            let (k, v) = h
                .split_once(':')
                .ok_or_else(|| format!("-H {h:?}: expected `Name: value`"))?;
            headers.insert(k.trim().to_string(), v.trim().to_string());
        }
        let deliver = DeliverFile {
            events: self.events,
            types: (!self.types.is_empty()).then(|| self.types.clone()),
            payload: self.payload.clone().map(serde_json::Value::String),
            duplicates: self.duplicates,
            copies: self.copies,
            spacing: self.spacing.clone(),
            sync: self.sync.map(|s| match s {
                SyncArg::Release => SyncMode::Release,
                SyncArg::LastByte => SyncMode::LastByte,
                SyncArg::SinglePacket => SyncMode::SinglePacket,
            }),
            reorder: self.reorder,
            forged: self.forged,
            lost_ack: self.lost_ack,
            timeout: self.timeout,
            redeliver: self.redeliver.clone(),
            tolerance: self.tolerance,
            concurrency: self.concurrency,
            ..DeliverFile::new(self.style.clone(), self.secret.clone())
        };
        let mut checks = ChecksConfig::none();
        checks.effects_once = Some(EffectsOnceConfig {
            verify: self.verify.as_ref().map(|url| VerifyConfig {
                count_field: self.count_field.clone(),
                ..VerifyConfig::url(url.clone())
            }),
        });
        checks.forged_rejected = Some(ForgedRejectedConfig::default());
        checks.duplicate_ack = Some(DuplicateAckConfig {
            on_failure: if self.weak_duplicate_ack {
                checks::duplicate_ack::OnFailure::Weak
            } else {
                checks::duplicate_ack::OnFailure::Fail
            },
        });
        // Its limit is the phase's timeout, set when the scenario is resolved.
        checks.ack_latency = Some(AckLatencyConfig::default());
        checks.ordering = Some(OrderingConfig {
            verify_state: self.verify_state.as_ref().map(|url| StateConfig {
                url: Some(url.clone()),
                field: self.state_field.clone(),
                sqlite: None,
                postgres: None,
                query: None,
            }),
        });
        Ok(ScenarioFile {
            name: Some("deliver".into()),
            description: Some(format!(
                "{} webhooks delivered at least once to {}",
                self.style, self.url
            )),
            seed: None,
            time_scale: None,
            server: None,
            server_config: None,
            target: Some(origin),
            relay: None,
            client: Default::default(),
            phases: vec![PhaseFile {
                name: "deliver".into(),
                burst: None,
                rate: None,
                clients: None,
                fleet: None,
                deliver: Some(deliver),
                request: RequestFile {
                    method: None,
                    path,
                    headers,
                    json: None,
                    body: None,
                    grpc: None,
                    message: None,
                    metadata: BTreeMap::new(),
                },
                client: None,
                capture: BTreeMap::new(),
            }],
            checks,
            report: Default::default(),
            tls: None,
            http: None,
            grpc: None,
        })
    }

    /// The checked plan: the flags resolved as a scenario would be, with `o`'s connection
    /// settings; a bad value's message names its flag.
    pub fn plan(&self, o: &Overrides) -> Result<Plan, String> {
        let o = Overrides {
            seed: self.seed.or(o.seed),
            time_scale: self.time_scale.or(o.time_scale),
            ..o.clone()
        };
        let file = self.scenario()?;
        crate::scenario::resolve(file, Path::new(ORIGIN), &o).map_err(flag_message)
    }
}

/// `url` as the target's origin and the request's path (with its query).
fn split_url(url: &str) -> Result<(String, String), String> {
    let bad = || format!("{url:?}: give the consumer's URL, e.g. http://127.0.0.1:8000/webhook");
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https") {
        return Err(format!(
            "{url:?}: a webhook consumer is reached over http:// or https://"
        ));
    }
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    if authority.is_empty() {
        return Err(bad());
    }
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    Ok((format!("{scheme}://{authority}"), path))
}

/// A resolver's error as the command line says it: the flag for the phase's field.
fn flag_message(e: ConfigError) -> String {
    if let ConfigError::Invalid {
        field: Some(field),
        message,
        ..
    } = &e
    {
        let flag = match field.strip_prefix("phases[0].deliver.") {
            Some(f) => Some(format!("--{}", f.replace('_', "-"))),
            None => field
                .strip_prefix("phases[0].request")
                .map(|_| "the URL or -H".to_string()),
        };
        if let Some(flag) = flag {
            return format!("{flag}: {message}");
        }
    }
    e.to_string()
}

pub(super) async fn deliver(a: DeliverArgs) -> Result<Outcome, CliError> {
    let connect = a.connect.connect()?;
    let o = Overrides {
        seed: a.seed,
        time_scale: a.time_scale,
        tls: connect.tls.clone(),
        http2: connect.http2,
        streams: a.connect.streams,
        max_header_list: a.connect.max_header_list,
        source: connect.source,
        ..Overrides::default()
    };
    let plan = a.plan(&o).map_err(CliError::Input)?;
    let stop = stop_on_signals();
    let live = a.dashboard.start(&plan.name).await?;
    let outcome = crate::run::run_plan(&plan, stop, crate::progress::wanted(), live)
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    emit(&outcome.report, &a.output)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: DeliverArgs,
    }

    fn args(flags: &[&str]) -> DeliverArgs {
        let mut all = vec!["deliver"];
        all.extend_from_slice(flags);
        Cli::try_parse_from(all).expect("flags parse").args
    }

    #[test]
    fn the_url_is_the_target_and_the_path() {
        assert_eq!(
            split_url("http://127.0.0.1:8000/hooks/stripe?x=1").unwrap(),
            ("http://127.0.0.1:8000".into(), "/hooks/stripe?x=1".into())
        );
        assert_eq!(
            split_url("https://localhost:9").unwrap(),
            ("https://localhost:9".into(), "/".into())
        );
        assert!(split_url("127.0.0.1:8000/webhook").is_err());
        assert!(split_url("grpc://127.0.0.1:1/x")
            .unwrap_err()
            .contains("http://"));
        assert!(split_url("http:///x").is_err());
    }

    #[test]
    fn the_flags_become_a_deliver_phase_and_the_delivery_checks() {
        let a = args(&[
            "http://127.0.0.1:9/webhook",
            "--style",
            "github",
            "--secret",
            "s3cret",
            "--events",
            "12",
            "--duplicates",
            "0.5",
            "--timeout",
            "2s",
            "--verify",
            "/effects/{event_id}",
            "--count-field",
            "n",
            "--time-scale",
            "0.5",
        ]);
        let plan = a.plan(&Overrides::default()).expect("a plan");
        assert_eq!(plan.phases.len(), 1);
        let crate::plan::PhaseKind::Deliver(d) = &plan.phases[0].kind else {
            panic!("a deliver phase: {:?}", plan.phases[0].kind);
        };
        assert_eq!(d.spec.events.count, 12);
        assert_eq!(d.spec.chaos.duplicates, 0.5);
        // Copies go together and after the acknowledgement unless told otherwise.
        assert_eq!(d.spec.chaos.spacing, webhooks::Spacing::Mixed);
        let timeout = d.spec.redelivery.as_ref().unwrap().timeout;
        assert_eq!(timeout, std::time::Duration::from_secs(1), "scaled");
        assert_eq!(plan.checks.ack_latency.as_ref().unwrap().timeout(), 1000);
        let verify = plan.checks.effects_once.as_ref().unwrap().verify.as_ref();
        assert_eq!(verify.unwrap().count_field, "n");
        assert_eq!(
            plan.checks.enabled_names(),
            [
                "effects_once",
                "forged_rejected",
                "duplicate_ack",
                "ack_latency",
                "ordering"
            ]
        );
    }

    #[test]
    fn the_spacing_flag_in_every_form() {
        use std::time::Duration;
        use webhooks::Spacing;
        for (given, want) in [
            ("mixed", Spacing::Mixed),
            ("together", Spacing::Burst),
            ("250ms", Spacing::Spaced(Duration::from_millis(250))),
        ] {
            let a = args(&[
                "http://127.0.0.1:9/webhook",
                "--style",
                "stripe",
                "--secret",
                "whsec_abc",
                "--spacing",
                given,
            ]);
            let plan = a.plan(&Overrides::default()).expect("a plan");
            let crate::plan::PhaseKind::Deliver(d) = &plan.phases[0].kind else {
                panic!("a deliver phase");
            };
            assert_eq!(d.spec.chaos.spacing, want, "{given}");
        }
    }

    #[test]
    fn a_bad_value_names_its_flag() {
        for (flags, says) in [
            (&["--duplicates", "1.5"][..], "--duplicates:"),
            (&["--style", "paypal"][..], "--style:"),
            (&["--events", "0"][..], "--events:"),
            (&["--redeliver", "soon"][..], "--redeliver:"),
            (&["--sync", "single-packet"][..], "--sync:"),
            (&["--spacing", "soon"][..], "--spacing:"),
        ] {
            let mut all = vec!["http://127.0.0.1:9/webhook", "--secret", "whsec_abc"];
            if !flags.contains(&"--style") {
                all.extend(["--style", "stripe"]);
            }
            all.extend_from_slice(flags);
            let e = args(&all).plan(&Overrides::default()).unwrap_err();
            assert!(e.starts_with(says), "{flags:?}: {e}");
        }
    }
}

//! The load driver: the four executors a phase can use.
//!
//! - `burst`: N operations released together on connections opened beforehand, R rounds, one
//!   shared Idempotency-Key per round — real concurrency on one key.
//! - `rate`: open model. Operation i is *intended* to start at a fixed time whatever happened
//!   before; a worker that picks it up late counts a late start, and latency is measured from the
//!   intended time too (coordinated omission corrected) as well as from the actual send.
//! - `clients`: closed model — C workers, each sending its next request when the last one ends.
//! - `fleet`: N clients that start together, each running operations under its retry policy: the
//!   thundering herd.
//!
//! Every worker owns its connection, its RNG and its [`Recorder`]; they are merged at the end.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use crate::stop::StopWait;

use primitives::draw::splitmix64;
use retry_policy::Limits;

use crate::http::http2::{Burst, H2Conn, SinglePacketRound, Slot};
use crate::http::release::Release as ReleasePoint;
use crate::http::{AttemptError, Conn, Reply, Target};
use crate::metrics::{AttemptIds, Recorder, Sink};
use crate::operation::{execute, execute_grpc, AttemptSpec, GrpcAnswer, GrpcTransport, Transport};
use crate::plan::{GrpcPlan, PhaseKind, PhasePlan, SyncMode};
use crate::shard::Shard;
use crate::template::{RequestTemplate, Var, Vars};
use grpc::call::{AttemptHeaders, CallRequest, CallResponse};
use grpc::frame::DEFAULT_MAX_MESSAGE;
use retry_policy::grpc::Attempt;

/// A request is a late start when no worker could pick it up within this of its intended time.
pub const LATE_THRESHOLD: Duration = Duration::from_millis(1);

/// Deterministic, collision-free keys and UUIDs for a run.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    nonce: u64,
}

impl Keys {
    /// Keys every shard of a run derives alike: from `seed` and the run's common start time, so
    /// a burst round has the same key on every shard and a rerun does not replay old keys.
    pub fn shared(seed: u64, start_at_unix_ms: u64) -> Keys {
        Keys {
            nonce: splitmix64(seed ^ splitmix64(start_at_unix_ms ^ 0x5348_4152_4453)),
        }
    }

    /// Keys derived from `seed`; `unique` mixes in the clock so reruns against a long-lived service
    /// do not replay old keys.
    pub fn new(seed: u64, unique: bool) -> Keys {
        let clock = if unique {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        } else {
            0
        };
        Keys {
            nonce: splitmix64(seed ^ splitmix64(clock)),
        }
    }

    fn hex(&self, salt: u64, phase: u16, n: u64) -> String {
        let a = splitmix64(self.nonce ^ splitmix64(salt ^ (u64::from(phase) << 48) ^ n));
        let b = splitmix64(a ^ 0x5151);
        format!("{:016x}{:016x}", a, b)
    }

    /// The Idempotency-Key of operation (or burst round) `n` of a phase.
    pub fn key(&self, phase: u16, n: u64) -> String {
        let h = self.hex(1, phase, n);
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// A seed derived from the run's keys for `salt` (a deliver phase's event ids): unique per
    /// run against a live service, as the keys are.
    pub fn derive(&self, salt: u64) -> u64 {
        splitmix64(self.nonce ^ splitmix64(4 ^ salt.rotate_left(32)))
    }

    /// The `{{uuid}}` of operation `n`.
    pub fn uuid(&self, phase: u16, n: u64) -> String {
        uuid_from_hex(&self.hex(2, phase, n))
    }

    /// An RNG for worker `client` of a phase.
    pub fn rng(&self, phase: u16, client: u32) -> StdRng {
        StdRng::seed_from_u64(splitmix64(
            self.nonce ^ splitmix64(3 ^ (u64::from(phase) << 40) ^ u64::from(client)),
        ))
    }
}

/// What a phase run needs from the run around it.
#[derive(Clone)]
pub struct PhaseCtx {
    /// The phase's index in the scenario.
    pub index: u16,
    /// Where the load goes.
    pub target: Arc<Target>,
    /// The run's keys and random sources.
    pub keys: Keys,
    /// When the run started: attempts' times count from here.
    pub run_start: Instant,
    /// Cancelled on Ctrl-C or SIGTERM (and, with `hard_stop`, at the phase's end): workers start
    /// nothing more, and operations in flight are cut short and counted as cancelled.
    pub stop: CancellationToken,
    /// The phase's duration is a hard stop: what is in flight when it ends is cancelled
    /// (`harness load`). Otherwise nothing starts after the end, and what is in flight finishes
    /// under its retry policy, so the checks judge whole operations.
    pub hard_stop: bool,
    /// Operations finished, for the progress bar.
    pub done: Arc<AtomicU64>,
    /// Keep one record per attempt (scenario runs); `load` does not.
    pub keep_attempts: bool,
    /// Values captured by earlier phases (read) — this phase's captures are returned separately.
    pub captured: Arc<HashMap<String, String>>,
    /// Where this phase's captures go (set by `run_phase`).
    pub capture_sink: Option<Arc<std::sync::Mutex<HashMap<String, String>>>>,
    /// This process's part of the run (see [`crate::shard`]): its share of the workers, and
    /// global numbers for operations and clients.
    pub shard: Shard,
    /// When the phase was scheduled to start (every shard alike); bursts with `every` time their
    /// rounds from it. `None`: from when the phase starts here.
    pub scheduled: Option<Instant>,
    /// The phase's request as far as it is the same for every client (set by `run_phase`).
    pub once: Option<Arc<PhaseOnce>>,
}

/// What of a phase's request is the same for every call of every client, built once per phase
/// and shared: every worker then sends from the same memory, which stays in cache, where a copy
/// of its own per worker (hundreds of them over HTTP/2) would be read cold on every call, and
/// nothing is rendered per call.
#[derive(Debug, Default)]
pub struct PhaseOnce {
    /// A gRPC phase's request message, encoded and framed, when its JSON has no placeholder.
    message: Option<bytes::Bytes>,
    /// The whole request, when nothing in it changes from call to call (no placeholder
    /// anywhere) and no client adds a header of its own.
    request: Option<Arc<crate::http::Outgoing>>,
}

impl PhaseOnce {
    /// `plan`'s, for clients with no header of their own.
    fn build(plan: &PhasePlan, target: &Arc<Target>) -> PhaseOnce {
        let message = PhaseOnce::message(plan);
        let request = PhaseOnce::request(plan, target, message.as_ref(), &[]);
        PhaseOnce { message, request }
    }

    /// A gRPC phase's message, encoded and framed, when its JSON has no placeholder.
    fn message(plan: &PhasePlan) -> Option<bytes::Bytes> {
        let g = plan.grpc.as_ref()?;
        let (body, _) = plan.template.body.as_ref()?;
        let message = g.method.encode_request(&body.literal()?).ok()?;
        Some(grpc::frame::encode(
            &message,
            grpc::frame::Encoding::Identity,
        ))
    }

    /// The whole request with a client's own headers `extra` (and, for a gRPC phase, its framed
    /// `message`), when nothing in it changes from call to call: no placeholder anywhere.
    fn request(
        plan: &PhasePlan,
        target: &Arc<Target>,
        message: Option<&bytes::Bytes>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Option<Arc<crate::http::Outgoing>> {
        let t = &plan.template;
        if !t.is_literal() {
            return None;
        }
        // No placeholder anywhere: the values are not read.
        let vars = Vars {
            seq: 0,
            client: 0,
            uuid: "",
            key: "",
            round: 0,
            captured: None,
        };
        let request = match &plan.grpc {
            None => t.render(target, &vars, extra),
            Some(g) => GrpcRendered {
                grpc: g,
                template: t,
                target,
                vars,
                extra,
                release: None,
                message: Some(message?),
                whole: None,
            }
            .request(&Attempt {
                number: 1,
                previous_attempts: None,
                timeout: None,
            })
            .ok()?,
        };
        Some(Arc::new(request))
    }
}

/// What a phase produced.
#[derive(Debug)]
pub struct PhaseOutcome {
    /// What the phase's clients measured.
    pub recorder: Recorder,
    /// When the phase started.
    pub started: Instant,
    /// How long it ran.
    pub duration: Duration,
    /// The shared key of each burst round, in order.
    pub round_keys: Vec<String>,
    /// Values this phase captured from its last successful response.
    pub captured: HashMap<String, String>,
    /// A deliver phase's journal and the ids the verify step asks about.
    pub delivered: Option<crate::deliver::Delivered>,
}

/// Total operations a phase will run, when known in advance (for the progress bar).
pub fn expected_operations(p: &PhasePlan) -> Option<u64> {
    expected_operations_of(p, Shard::WHOLE)
}

/// Operations a shard of a phase will run, when known in advance.
pub fn expected_operations_of(p: &PhasePlan, shard: Shard) -> Option<u64> {
    match &p.kind {
        PhaseKind::Burst { size, rounds, .. } => {
            Some(shard.share(u64::from(*size)) * u64::from(*rounds))
        }
        PhaseKind::Rate { stages, .. } => Some(
            shard.share(
                stages
                    .iter()
                    .map(|(a, b, d)| ((a + b) / 2.0 * d.as_secs_f64()) as u64)
                    .sum(),
            ),
        ),
        PhaseKind::Clients { requests, .. } => requests.map(|r| shard.share(r)),
        PhaseKind::Fleet {
            clients,
            operations,
        } => Some(shard.share(u64::from(*clients)) * operations),
        PhaseKind::Deliver(d) => Some(shard.share(d.spec.events.count)),
    }
}

fn client_header(enabled: bool, phase: u16, client: u32) -> Vec<(HeaderName, HeaderValue)> {
    if !enabled {
        return Vec::new();
    }
    let v = HeaderValue::from_str(&format!("p{phase}-c{client}"))
        .unwrap_or(HeaderValue::from_static("c"));
    vec![(HeaderName::from_static("x-client-id"), v)]
}

/// How long a phase runs by its own definition, when it has a duration.
pub fn phase_length(kind: &PhaseKind) -> Option<Duration> {
    match kind {
        PhaseKind::Rate { stages, .. } => Some(stages.iter().map(|s| s.2).sum()),
        PhaseKind::Clients { duration, .. } => *duration,
        // Rounds on the clock: the last goes at (rounds − 1) × every, and one more `every` is
        // its time to finish.
        PhaseKind::Burst {
            every: Some(every),
            rounds,
            ..
        } => Some(every.saturating_mul(*rounds)),
        PhaseKind::Burst { .. } | PhaseKind::Fleet { .. } | PhaseKind::Deliver(_) => None,
    }
}

/// Runs one phase to its end (duration, request count, or rounds), or until `stop` is cancelled.
pub async fn run_phase(plan: Arc<PhasePlan>, ctx: PhaseCtx) -> PhaseOutcome {
    let started = Instant::now();
    let mut limits = Limits::new(&plan.policy, Instant::now());
    limits.grpc_throttle = plan
        .grpc
        .as_ref()
        .and_then(|g| g.throttle)
        .map(retry_policy::grpc::Throttle::new);
    let shared = Arc::new(limits);
    let captures = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let stop = ctx.stop.child_token();
    let timer = match (ctx.hard_stop, phase_length(&plan.kind)) {
        (true, Some(d)) => {
            let stop = stop.clone();
            Some(tokio::spawn(async move {
                tokio::time::sleep(d).await;
                stop.cancel();
            }))
        }
        _ => None,
    };
    let once = Some(Arc::new(PhaseOnce::build(&plan, &ctx.target)));
    let ctx = PhaseCtx {
        capture_sink: Some(captures.clone()),
        stop,
        once,
        ..ctx
    };
    let sink = Sink::new();
    // The workers' stop signal follows the phase's token.
    let watcher = {
        let (stop, signal) = (ctx.stop.clone(), sink.stop.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            signal.fire();
        })
    };
    let mut delivered = None;
    let (recorder, round_keys) = match plan.kind.clone() {
        PhaseKind::Burst {
            size,
            rounds,
            pause,
            every,
            sync,
        } => {
            let timing = match every {
                Some(every) => Rounds::Every {
                    first: ctx.scheduled.unwrap_or(started),
                    every,
                },
                None => Rounds::Pause(pause),
            };
            burst(&plan, &ctx, &shared, &sink, size, rounds, timing, sync).await
        }
        PhaseKind::Rate {
            stages,
            connections,
        } => (
            rate(&plan, &ctx, &shared, &sink, stages, connections).await,
            Vec::new(),
        ),
        PhaseKind::Clients {
            concurrency,
            duration,
            requests,
            think,
        } => (
            closed(
                &plan,
                &ctx,
                &shared,
                &sink,
                concurrency,
                duration,
                requests,
                think,
            )
            .await,
            Vec::new(),
        ),
        PhaseKind::Fleet {
            clients,
            operations,
        } => (
            fleet(&plan, &ctx, &shared, &sink, clients, operations).await,
            Vec::new(),
        ),
        PhaseKind::Deliver(d) => {
            let (rec, out) = crate::deliver::run(&plan, &d, &ctx, &sink).await;
            delivered = Some(out);
            (rec, Vec::new())
        }
    };
    if let Some(t) = timer {
        t.abort();
    }
    watcher.abort();
    let captured = std::mem::take(&mut *captures.lock().unwrap_or_else(|e| e.into_inner()));
    PhaseOutcome {
        recorder,
        started,
        duration: started.elapsed(),
        round_keys,
        captured,
        delivered,
    }
}

/// One client of a phase: its connection, random source, measurements and identity header.
///
/// Laid out in the order written (`repr(C)`): what every call reads first, the random source
/// (drawn from only for a retry's jitter) last, so that a call touches few cache lines of it.
#[repr(C)]
struct PhaseClient {
    client: u32,
    /// The whole request, built once when nothing in it changes from call to call (no
    /// placeholder anywhere): an attempt with nothing of its own to add (an HTTP attempt's
    /// `x-deadline`, a gRPC attempt's `grpc-timeout` or `grpc-previous-rpc-attempts`, a burst's
    /// release) is sent as it is, with nothing rendered per call. The phase's own
    /// ([`PhaseOnce`]) unless this client adds a header.
    request: Option<Arc<crate::http::Outgoing>>,
    /// A gRPC phase's request message, encoded and framed once when its JSON has no
    /// placeholder.
    grpc_message: Option<bytes::Bytes>,
    extra: Vec<(HeaderName, HeaderValue)>,
    /// The phase's stop, waited on beside every operation: made once, as waiting on a new one
    /// per operation registered with (and left) a shared list each time.
    stopped: StopWait,
    conn: Conn,
    rec: Recorder,
    rng: StdRng,
}

impl PhaseClient {
    /// Client `client` of the phase, on `conn`, drawing from `rng`.
    fn new(
        plan: &PhasePlan,
        ctx: &PhaseCtx,
        sink: &Arc<Sink>,
        client: u32,
        conn: Conn,
        rng: StdRng,
    ) -> PhaseClient {
        PhaseClient {
            client,
            conn,
            rng,
            rec: Recorder::worker(ctx.keep_attempts, sink),
            extra: client_header(plan.client_id_header, ctx.index, client),
            stopped: StopWait::new(sink.stop.clone()),
            grpc_message: None,
            request: None,
        }
        .with_requests_built_once(plan, ctx)
    }

    /// The requests built once (see the fields), when the phase's template allows: the phase's,
    /// shared, unless this client's request has a header of its own.
    fn with_requests_built_once(mut self, plan: &PhasePlan, ctx: &PhaseCtx) -> PhaseClient {
        let phase = match &ctx.once {
            Some(phase) => phase.clone(),
            None => Arc::new(PhaseOnce::build(plan, &ctx.target)),
        };
        self.request = match self.extra.is_empty() {
            true => phase.request.clone(),
            false => PhaseOnce::request(plan, &ctx.target, phase.message.as_ref(), &self.extra),
        };
        self.grpc_message = phase.message.clone();
        self
    }

    /// Client `client` on `conn`, with the phase's usual random source.
    fn on(
        plan: &PhasePlan,
        ctx: &PhaseCtx,
        sink: &Arc<Sink>,
        client: u32,
        conn: Conn,
    ) -> PhaseClient {
        PhaseClient::new(
            plan,
            ctx,
            sink,
            client,
            conn,
            ctx.keys.rng(ctx.index, client),
        )
    }

    /// Operation `op`'s ids in the attempt log.
    fn ids(&self, ctx: &PhaseCtx, op: u64) -> AttemptIds {
        AttemptIds {
            phase: ctx.index,
            op,
            client: self.client,
        }
    }

    /// What operation `op` is sent with: its burst round, key and release (a burst member's),
    /// or its own key, and its uuid, each made only when the template uses it.
    fn op_vars<'b>(
        plan: &PhasePlan,
        ctx: &PhaseCtx,
        op: u64,
        burst: Option<(u64, &'b str, Release<'b>)>,
    ) -> OpVars<'b> {
        let (round, key, release) = match burst {
            Some((round, key, release)) => (round, OpKey::Shared(key), Some(release)),
            None if plan.template.uses(Var::Key) => {
                (0, OpKey::Own(ctx.keys.key(ctx.index, op)), None)
            }
            None => (0, OpKey::Shared(""), None),
        };
        let uuid = if plan.template.uses(Var::Uuid) {
            ctx.keys.uuid(ctx.index, op)
        } else {
            String::new()
        };
        OpVars {
            round,
            key,
            release,
            uuid,
        }
    }

    /// Runs gRPC operation `op` (of a phase whose `plan.grpc` is `g`) under the call's policy. A burst
    /// member passes its round, the round's shared key and the release point its first attempt
    /// waits at; any other operation uses its own key.
    ///
    /// Separate from [`PhaseClient::run_http`], and chosen by the caller ([`run_op!`]): a
    /// worker moves this future whole into its state for every operation, and one future for
    /// both kinds would be as large as the larger for either.
    async fn run_grpc(
        &mut self,
        g: &GrpcPlan,
        plan: &PhasePlan,
        ctx: &PhaseCtx,
        shared: &Limits,
        op: u64,
        burst: Option<(u64, &str, Release<'_>)>,
    ) {
        let v = Self::op_vars(plan, ctx, op, burst);
        let ids = self.ids(ctx, op);
        let transport = GrpcRendered {
            grpc: g,
            template: &plan.template,
            target: &ctx.target,
            vars: v.vars(op, self.client, ctx),
            extra: &self.extra,
            release: v.release,
            message: self.grpc_message.as_ref(),
            whole: self.request.as_deref(),
        };
        let mut observer = self.rec.operation(ids, ctx.run_start);
        let result = tokio::select! {
            biased;
            () = &mut self.stopped => None,
            r = execute_grpc(
                &transport,
                &mut self.conn,
                &mut observer,
                &g.policy,
                shared.grpc_throttle.as_ref(),
                g.deadline,
                plan.policy.timeout,
                &mut self.rng,
            ) => Some(r),
        };
        let Some(result) = result else {
            self.rec.cancelled += 1;
            self.conn = Conn::new(ctx.target.clone());
            return;
        };
        if let (false, Some(sink), Some(last)) =
            (plan.capture.is_empty(), &ctx.capture_sink, &result.last)
        {
            let reply = last
                .response
                .messages
                .first()
                .filter(|_| last.response.status.code == grpc::Code::Ok);
            if let Some(json) = reply.and_then(|m| g.method.decode_response(m).ok()) {
                capture(&plan.capture, json.as_bytes(), sink);
            }
        }
        ctx.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs HTTP operation `op` under the phase's policy (see [`PhaseClient::run_grpc`] for
    /// `burst`, and why the two are apart).
    async fn run_http(
        &mut self,
        plan: &PhasePlan,
        ctx: &PhaseCtx,
        shared: &Limits,
        op: u64,
        burst: Option<(u64, &str, Release<'_>)>,
    ) {
        let v = Self::op_vars(plan, ctx, op, burst);
        let ids = self.ids(ctx, op);
        let mut transport = Rendered {
            conn: &mut self.conn,
            template: &plan.template,
            target: &ctx.target,
            vars: v.vars(op, self.client, ctx),
            extra: &self.extra,
            release: v.release,
            whole: self.request.as_deref(),
        };
        let mut observer = self.rec.operation(ids, ctx.run_start);
        let result = tokio::select! {
            biased;
            () = &mut self.stopped => None,
            r = execute(
                &mut transport,
                &mut observer,
                &plan.policy,
                shared,
                &mut self.rng,
            ) => Some(r),
        };
        let Some(result) = result else {
            // Cut short mid-request: the connection's state is unknown, so it is not reused.
            self.rec.cancelled += 1;
            self.conn = Conn::new(ctx.target.clone());
            return;
        };
        if let (false, Some(sink), Some(reply)) =
            (plan.capture.is_empty(), &ctx.capture_sink, &result.reply)
        {
            if reply.status.is_success() {
                capture(&plan.capture, &reply.body, sink);
            }
        }
        ctx.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// What [`PhaseClient::op_vars`] makes for an operation.
struct OpVars<'b> {
    round: u64,
    key: OpKey<'b>,
    release: Option<Release<'b>>,
    uuid: String,
}

impl OpVars<'_> {
    /// The template's values for operation `op` of `client`.
    fn vars<'v>(&'v self, op: u64, client: u32, ctx: &'v PhaseCtx) -> Vars<'v> {
        Vars {
            seq: op,
            client,
            uuid: &self.uuid,
            key: self.key.as_str(),
            round: self.round,
            captured: Some(&ctx.captured),
        }
    }
}

/// An operation's key: a burst round's, or its own.
enum OpKey<'b> {
    Shared(&'b str),
    Own(String),
}

impl OpKey<'_> {
    fn as_str(&self) -> &str {
        match self {
            OpKey::Shared(k) => k,
            OpKey::Own(k) => k,
        }
    }
}

/// Runs operation `op` of worker `w` (a [`PhaseClient`]): its gRPC call when the phase is gRPC,
/// else its HTTP request, each awaited as a future of its own size.
macro_rules! run_op {
    ($w:expr, $plan:expr, $ctx:expr, $shared:expr, $op:expr, $burst:expr) => {
        if let Some(g) = &$plan.grpc {
            $w.run_grpc(g, $plan, $ctx, $shared, $op, $burst).await
        } else {
            $w.run_http($plan, $ctx, $shared, $op, $burst).await
        }
    };
}

/// When a burst's rounds go.
#[derive(Debug, Clone, Copy)]
enum Rounds {
    /// Each round when the last has ended and this pause has passed.
    Pause(Duration),
    /// Round `k` (from 1) at `first + (k - 1) × every`, on every shard alike; a round whose time
    /// has passed (the last one ran long) goes at once and is counted late.
    Every { first: Instant, every: Duration },
}

#[allow(clippy::too_many_arguments)]
async fn burst(
    plan: &Arc<PhasePlan>,
    ctx: &PhaseCtx,
    shared: &Arc<Limits>,
    sink: &Arc<Sink>,
    size: u32,
    rounds: u32,
    timing: Rounds,
    sync: SyncMode,
) -> (Recorder, Vec<String>) {
    let mut total = Recorder::new(ctx.keep_attempts);
    let mut keys = Vec::new();
    // This shard's members of every round; member `i` is the round's member `shard.global(i)`.
    let members = ctx.shard.share(u64::from(size)) as u32;
    if members == 0 {
        return (total, keys);
    }
    // Over HTTP/2 a burst has connections of its own, as many as a round needs at the server's
    // stream limit (and `streams` per connection at most, but for single-packet rounds).
    let h2 = ctx.target.http2.as_ref().map(|pool| {
        let most = if sync == SyncMode::SinglePacket {
            crate::http::http2::OWN_STREAM_CAP
        } else {
            pool.streams()
        };
        (Arc::new(Burst::new(ctx.target.clone())), most)
    });
    let member_conn = |i: usize| match &h2 {
        Some((b, _)) => Conn::H2(H2Conn::on(b.slot(i))),
        None => Conn::new(ctx.target.clone()),
    };
    let mut conns: Vec<Conn> = Vec::new();
    let joint_slot = h2
        .as_ref()
        .filter(|_| sync == SyncMode::SinglePacket)
        .map(|(b, _)| b.clone());
    for round in 1..=u64::from(rounds) {
        if ctx.stop.is_cancelled() {
            break;
        }
        let key = ctx.keys.key(ctx.index, round);
        keys.push(key.clone());
        // Connections first, so the release is not spread by TCP handshakes.
        if let Some((b, most)) = &h2 {
            if let Err(e) = b.open(members as usize, *most, plan.policy.timeout).await {
                tracing::error!("burst connections: {e}");
            }
        }
        if conns.is_empty() {
            conns = (0..members as usize).map(member_conn).collect();
        }
        match &joint_slot {
            Some(_) => {}
            None => {
                for c in &mut conns {
                    if let Err(e) = c.open().await {
                        tracing::warn!("burst connection failed: {e}");
                    }
                }
            }
        }
        // A timed round waits for its instant on a thread sleeping on the OS's fine timer
        // (tokio's ticks are 1 ms), and its members start only then: the wait is no part of any
        // request's latency or timeout.
        let at = match timing {
            Rounds::Every { first, every } => {
                Some(first + every.saturating_mul(u32::try_from(round - 1).unwrap_or(u32::MAX)))
            }
            Rounds::Pause(_) => None,
        };
        if at.is_some_and(|at| Instant::now() > at + LATE_THRESHOLD) {
            total.late_starts += 1;
        }
        if let Some(at) = at.filter(|&at| at > Instant::now()) {
            let stop = ctx.stop.clone();
            let _ = tokio::task::spawn_blocking(move || sleep_until_precisely(at, &stop)).await;
            if ctx.stop.is_cancelled() {
                break;
            }
        }
        let barrier = Arc::new(ReleasePoint::new(members as usize));
        // Single-packet: the round is one write, made when its last member submits.
        let joint = joint_slot
            .as_ref()
            .map(|slot| Arc::new(SinglePacketRound::new(slot.clone(), members as usize)));
        let mut tasks = Vec::new();
        for (i, conn) in conns.drain(..).enumerate() {
            let (plan, ctx, shared, barrier, key, sink, joint) = (
                plan.clone(),
                ctx.clone(),
                shared.clone(),
                barrier.clone(),
                key.clone(),
                sink.clone(),
                joint.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let member = ctx.shard.global(i as u64);
                let client = member as u32;
                let rng = ctx.keys.rng(ctx.index, client ^ ((round as u32) << 16));
                let mut w = PhaseClient::new(&plan, &ctx, &sink, client, conn, rng);
                let op = (round - 1) * u64::from(size) + member + 1;
                let release = match &joint {
                    Some(j) => Release::SinglePacket(j),
                    None => Release::Barrier {
                        barrier: &barrier,
                        last_byte: sync == SyncMode::LastByte,
                    },
                };
                run_op!(w, &plan, &ctx, &shared, op, Some((round, &key, release)));
                (w.conn, w.rec)
            }));
        }
        for t in tasks {
            match t.await {
                Ok((conn, rec)) => {
                    total.merge(&rec);
                    conns.push(conn);
                }
                Err(e) => total.worker_died("a burst worker", e),
            }
        }
        while conns.len() < members as usize {
            conns.push(member_conn(conns.len()));
        }
        if let Rounds::Pause(pause) = timing {
            if round < u64::from(rounds) && !pause.is_zero() {
                tokio::select! {
                    () = ctx.stop.cancelled() => {}
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
    (total, keys)
}

/// Sleeps on this thread until `at` (the OS timer: within tens of microseconds), or until `stop`.
fn sleep_until_precisely(at: Instant, stop: &CancellationToken) {
    const LOOK: Duration = Duration::from_millis(10);
    loop {
        let now = Instant::now();
        if now >= at || stop.is_cancelled() {
            return;
        }
        std::thread::sleep((at - now).min(LOOK));
    }
}

/// How a burst member's first attempt leaves.
#[derive(Clone, Copy)]
enum Release<'a> {
    /// At the round's barrier; with `last_byte`, only the request's last byte waits for it.
    Barrier {
        barrier: &'a ReleasePoint,
        last_byte: bool,
    },
    /// Joined with the round's other first attempts into one HTTP/2 write.
    SinglePacket(&'a SinglePacketRound),
}

/// The driver's transport: each attempt rendered from the phase's request template, on the
/// worker's connection; a burst's first attempt is released with the round's.
struct Rendered<'a> {
    conn: &'a mut Conn,
    template: &'a RequestTemplate,
    target: &'a Target,
    vars: Vars<'a>,
    extra: &'a [(HeaderName, HeaderValue)],
    release: Option<Release<'a>>,
    /// The whole request, when it is the same for every call (see [`PhaseClient`]).
    whole: Option<&'a crate::http::Outgoing>,
}

impl Transport for Rendered<'_> {
    // Not an `async fn`: that would keep `spec` twice in its state (as the argument and as the
    // local it is moved to), and what is rendered from it is all the exchange needs.
    #[allow(clippy::manual_async_fn)]
    fn send(
        &mut self,
        spec: AttemptSpec<'_>,
    ) -> impl Future<Output = Result<Reply, AttemptError>> + Send {
        let vars = Vars {
            key: spec.fresh_key.unwrap_or(self.vars.key),
            ..self.vars
        };
        let timeout = spec.call.timeout;
        let release = self.release.filter(|_| spec.call.attempt == 1);
        // A key made fresh for the attempt changes nothing in a request without placeholders.
        let req = match (spec.deadline_unix_ms, self.whole) {
            (None, Some(whole)) if release.is_none() => Cow::Borrowed(whole),
            (Some(ms), _) => {
                let mut extra = self.extra.to_vec();
                extra.push((HeaderName::from_static("x-deadline"), HeaderValue::from(ms)));
                Cow::Owned(self.template.render(self.target, &vars, &extra))
            }
            (None, _) => Cow::Owned(self.template.render(self.target, &vars, self.extra)),
        };
        let conn = &mut *self.conn;
        // This future is moved whole into the operation's state on every attempt, and every
        // future that holds it is moved whole too: it keeps only an HTTP/2 exchange inline (a
        // few hundred bytes) and boxes what is larger — an HTTP/1.1 exchange (where a request
        // costs several times more, in the kernel, than the box) and a burst's first attempt.
        async move {
            match (release, conn) {
                (None, Conn::H2(h2)) => h2.send_ref(&req, timeout).await,
                (None, conn) => Box::pin(conn.send_ref(&req, timeout)).await,
                (Some(Release::Barrier { barrier, last_byte }), conn) => {
                    let req = req.into_owned();
                    Box::pin(conn.send_released(req, timeout, Some(barrier), last_byte)).await
                }
                (Some(Release::SinglePacket(round)), _) => {
                    Box::pin(round.submit(req.into_owned(), timeout)).await
                }
            }
        }
    }
}

/// The driver's transport for a gRPC call: each attempt rendered from the phase's template (the
/// metadata as headers, the message as JSON, encoded for the method), with its
/// `grpc-timeout` and `grpc-previous-rpc-attempts`; a burst's first attempt is released with the
/// round's. A hedge goes out on another stream of the worker's connection.
struct GrpcRendered<'a> {
    grpc: &'a GrpcPlan,
    template: &'a RequestTemplate,
    target: &'a Target,
    vars: Vars<'a>,
    extra: &'a [(HeaderName, HeaderValue)],
    release: Option<Release<'a>>,
    /// The message, framed, when it is the same for every call (see [`PhaseClient`]).
    message: Option<&'a bytes::Bytes>,
    /// The whole request, when it is the same for every call (see [`PhaseClient`]).
    whole: Option<&'a crate::http::Outgoing>,
}

impl GrpcRendered<'_> {
    /// The HTTP/2 request of `attempt`, or the status that keeps it from being sent (a message
    /// the method's type refuses once its placeholders are filled in).
    fn request(&self, attempt: &Attempt) -> Result<crate::http::Outgoing, grpc::Status> {
        let rendered = match self.message {
            Some(_) => self
                .template
                .render_head(self.target, &self.vars, self.extra),
            None => self.template.render(self.target, &self.vars, self.extra),
        };
        let message = match self.message {
            Some(_) => bytes::Bytes::new(),
            None => {
                let json = std::str::from_utf8(&rendered.body)
                    .map_err(|e| grpc::Status::new(grpc::Code::Internal, e.to_string()))?;
                self.grpc
                    .method
                    .encode_request(json)
                    .map_err(|e| grpc::Status::new(grpc::Code::Internal, e.to_string()))?
            }
        };
        let call = CallRequest {
            path: rendered.uri,
            message,
            metadata: grpc::metadata::Metadata::new(),
            encoding: None,
            // Set below from a static value, not copied for every call.
            user_agent: None,
        };
        let headers = AttemptHeaders {
            timeout: attempt.timeout,
            previous_attempts: attempt.previous_attempts,
        };
        let mut out = match self.message {
            Some(framed) => call.outgoing_framed(headers, framed.clone()),
            None => call.outgoing(headers),
        };
        out.headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(concat!("harness/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in rendered.headers {
            if let Some(name) = name {
                out.headers.insert(name, value);
            }
        }
        Ok(out)
    }
}

impl GrpcTransport for GrpcRendered<'_> {
    type Lane = Conn;

    fn spare(&self, first: &Conn) -> Conn {
        first.sibling()
    }

    async fn send(&self, lane: &mut Conn, attempt: Attempt, timeout: Duration) -> GrpcAnswer {
        let release = self.release.filter(|_| attempt.number == 1);
        // This future is moved into the call's state for every attempt, and written whole: it
        // stays small (the HTTP/2 exchange), and what is larger — rendering a request, an
        // HTTP/1.1 lane (gRPC is HTTP/2) — is boxed.
        let reply = match (self.whole, lane) {
            // Nothing of its own to add: the request built once goes as it is.
            (Some(whole), Conn::H2(h2))
                if release.is_none()
                    && attempt.timeout.is_none()
                    && attempt.previous_attempts.is_none() =>
            {
                h2.send_ref(whole, timeout)
                    .await
                    .map_err(Unanswered::Failed)
            }
            (_, lane) => Box::pin(self.send_rendered(lane, &attempt, release, timeout)).await,
        };
        match reply {
            Ok(r) => GrpcAnswer {
                http_status: Some(r.status.as_u16()),
                error: None,
                response: Box::new(CallResponse::read(r.into(), DEFAULT_MAX_MESSAGE)),
            },
            Err(Unanswered::Unsendable(status)) => GrpcAnswer {
                response: Box::new(CallResponse::failed(status)),
                http_status: None,
                error: Some(history::ErrorKind::Other),
            },
            Err(Unanswered::Failed(e)) => GrpcAnswer {
                response: Box::new(CallResponse::failed(grpc::call::status_of_failure(&e))),
                http_status: None,
                error: Some(e.kind),
            },
        }
    }
}

/// Why a gRPC attempt got no answer.
enum Unanswered {
    /// Its request could not be built (see [`GrpcRendered::request`]).
    Unsendable(grpc::Status),
    /// The transport failed.
    Failed(AttemptError),
}

impl GrpcRendered<'_> {
    /// Renders `attempt`'s request and sends it, released with its round when it is a burst's.
    async fn send_rendered(
        &self,
        lane: &mut Conn,
        attempt: &Attempt,
        release: Option<Release<'_>>,
        timeout: Duration,
    ) -> Result<Reply, Unanswered> {
        let req = self.request(attempt).map_err(Unanswered::Unsendable)?;
        match release {
            None => lane.send(req, timeout).await,
            Some(Release::Barrier { barrier, last_byte }) => {
                Box::pin(lane.send_released(req, timeout, Some(barrier), last_byte)).await
            }
            Some(Release::SinglePacket(round)) => Box::pin(round.submit(req, timeout)).await,
        }
        .map_err(Unanswered::Failed)
    }
}

/// Keeps the named fields of a JSON response body.
fn capture(
    fields: &[(String, String)],
    body: &[u8],
    sink: &std::sync::Mutex<HashMap<String, String>>,
) {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let mut out = sink.lock().unwrap_or_else(|e| e.into_inner());
    for (name, path) in fields {
        let mut v = &json;
        for part in path.split('.') {
            match v.get(part) {
                Some(next) => v = next,
                None => break,
            }
        }
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null
            | serde_json::Value::Object(_)
            | serde_json::Value::Array(_) => continue,
            other => other.to_string(),
        };
        out.insert(name.clone(), text);
    }
}

/// A version-4 UUID string from 32 random hex digits (version and variant digits set).
pub fn uuid_from_hex(h: &str) -> String {
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// How many requests the stages schedule at or before `t` from the phase's start.
pub fn scheduled_by(stages: &[(f64, f64, Duration)], t: Duration) -> u64 {
    // `intended_offset` grows with `i`: the first `i` past `t` (or past the end) is the count.
    let (mut lo, mut hi) = (0u64, 1u64);
    while intended_offset(stages, hi - 1).is_some_and(|o| o <= t) {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    // Every i < lo is scheduled by t; the answer lies in [lo, hi).
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if intended_offset(stages, mid).is_some_and(|o| o <= t) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The intended start of operation `i` (0-based) from the stages, or `None` past the end.
pub fn intended_offset(stages: &[(f64, f64, Duration)], i: u64) -> Option<Duration> {
    let mut before = 0.0; // operations scheduled in earlier stages
    let mut t0 = 0.0;
    let n = i as f64;
    for (a, b, d) in stages {
        let d = d.as_secs_f64();
        let in_stage = (a + b) / 2.0 * d;
        if n < before + in_stage {
            let k = n - before;
            // Rate grows linearly from a to b: N(t) = a·t + (b−a)·t²/(2d). Solve N(t) = k.
            let slope = (b - a) / d;
            let t = if slope.abs() < 1e-12 {
                k / a
            } else {
                let disc = (a * a + 2.0 * slope * k).max(0.0);
                (-a + disc.sqrt()) / slope
            };
            return Some(Duration::from_secs_f64(t0 + t.clamp(0.0, d)));
        }
        before += in_stage;
        t0 += d;
    }
    None
}

async fn rate(
    plan: &Arc<PhasePlan>,
    ctx: &PhaseCtx,
    shared: &Arc<Limits>,
    sink: &Arc<Sink>,
    stages: Vec<(f64, f64, Duration)>,
    connections: u32,
) -> Recorder {
    let stages = Arc::new(stages);
    let next = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(0));
    let end = start + stages.iter().map(|s| s.2).sum::<Duration>();
    let shard = ctx.shard;
    let connections = shard.share(u64::from(connections)) as u32;
    let pacer = {
        let (stages, permits, stop) = (stages.clone(), permits.clone(), ctx.stop.clone());
        let start = start.into_std();
        tokio::task::spawn_blocking(move || {
            pace(&stages, shard, start, &permits, &stop, connections)
        })
    };
    let clients = (0..connections).map(|l| shard.global(u64::from(l)) as u32);
    let tasks = spawn_clients(ctx, clients, |client, conn| {
        let (plan, ctx, shared, stages, next, sink, permits) = (
            plan.clone(),
            ctx.clone(),
            shared.clone(),
            stages.clone(),
            next.clone(),
            sink.clone(),
            permits.clone(),
        );
        async move {
            let mut w = PhaseClient::on(&plan, &ctx, &sink, client, conn);
            loop {
                if ctx.stop.is_cancelled() {
                    break;
                }
                // A permit is a request whose time has come (see `pace`).
                match permits.acquire().await {
                    Ok(p) => p.forget(),
                    Err(_) => break,
                }
                if ctx.stop.is_cancelled() {
                    break;
                }
                // This shard's requests are every `count`th of the phase's schedule.
                let i = ctx.shard.global(next.fetch_add(1, Ordering::Relaxed));
                let Some(offset) = intended_offset(&stages, i) else {
                    break;
                };
                // Past the phase's end nothing starts: a request still due then was never sent
                // (the backlog the target could not take at this rate).
                if tokio::time::Instant::now() >= end || ctx.stop.is_cancelled() {
                    w.rec.not_started += 1;
                    break;
                }
                let intended = start + offset;
                // Late means no connection was free when the request was due — not the pacer's
                // own lateness of some microseconds, which every request has.
                if tokio::time::Instant::now().saturating_duration_since(intended) > LATE_THRESHOLD
                {
                    w.rec.late_starts += 1;
                }
                run_op!(w, &plan, &ctx, &shared, i + 1, None);
                w.rec.intended(intended.elapsed());
            }
            w.rec
        }
    });
    let mut rec = collect(tasks, ctx.keep_attempts).await;
    if let Err(e) = pacer.await {
        rec.worker_died("the rate pacer", e);
    }
    // Requests whose time had come and that no worker took.
    let due = shard.mine_below(scheduled_by(&stages, start.elapsed()));
    rec.not_started += due.saturating_sub(next.load(Ordering::Relaxed).min(due));
    rec
}

/// Releases a rate phase's requests at their intended times: one permit per request, added to
/// `permits` when its time comes; at the end (or on `stop`) one more per worker, which then finds
/// no request left and ends.
///
/// Why a thread of its own rather than a `tokio::time::sleep_until` in each worker: tokio's timer
/// has a resolution of 1 ms and rounds a deadline up to the next tick, so requests started on
/// average about 1 ms after their intended time — a lag of the generator's own that the
/// CO-corrected latency then reported. A thread sleeping on the OS's high-resolution timer
/// releases each request within tens of microseconds of its time (late ones in a batch when it
/// wakes late).
fn pace(
    stages: &[(f64, f64, Duration)],
    shard: Shard,
    start: std::time::Instant,
    permits: &Arc<tokio::sync::Semaphore>,
    stop: &CancellationToken,
    workers: u32,
) {
    // At most this long between looks at `stop` and at whether the workers are still there.
    const LOOK: Duration = Duration::from_millis(10);
    let mut released = 0u64;
    // The workers hold the other references; when they are all gone there is nobody to pace.
    while !stop.is_cancelled() && Arc::strong_count(permits) > 1 {
        let now = std::time::Instant::now();
        let mut due = 0usize;
        let next_at = loop {
            match intended_offset(stages, shard.global(released)) {
                Some(offset) if start + offset <= now => {
                    released += 1;
                    due += 1;
                }
                other => break other.map(|offset| start + offset),
            }
        };
        if due > 0 {
            permits.add_permits(due);
        }
        let Some(at) = next_at else { break };
        std::thread::sleep(at.saturating_duration_since(now).min(LOOK));
    }
    permits.add_permits(workers as usize);
}

#[allow(clippy::too_many_arguments)]
async fn closed(
    plan: &Arc<PhasePlan>,
    ctx: &PhaseCtx,
    shared: &Arc<Limits>,
    sink: &Arc<Sink>,
    concurrency: u32,
    duration: Option<Duration>,
    requests: Option<u64>,
    think: Duration,
) -> Recorder {
    let end = duration.map(|d| Instant::now() + d);
    let next = Arc::new(AtomicU64::new(0));
    let shard = ctx.shard;
    let requests = requests.map(|r| shard.share(r));
    let clients = (0..shard.share(u64::from(concurrency))).map(|l| shard.global(l) as u32);
    let tasks = spawn_clients(ctx, clients, |client, conn| {
        let (plan, ctx, shared, next, sink) = (
            plan.clone(),
            ctx.clone(),
            shared.clone(),
            next.clone(),
            sink.clone(),
        );
        async move {
            let mut w = PhaseClient::on(&plan, &ctx, &sink, client, conn);
            loop {
                if sink.stop.is_fired() || end.is_some_and(|e| Instant::now() >= e) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if requests.is_some_and(|r| i >= r) {
                    break;
                }
                run_op!(w, &plan, &ctx, &shared, ctx.shard.global(i) + 1, None);
                if !think.is_zero() {
                    tokio::select! {
                        () = ctx.stop.cancelled() => {}
                        () = tokio::time::sleep(think) => {}
                    }
                }
            }
            w.rec
        }
    });
    collect(tasks, ctx.keep_attempts).await
}

async fn fleet(
    plan: &Arc<PhasePlan>,
    ctx: &PhaseCtx,
    shared: &Arc<Limits>,
    sink: &Arc<Sink>,
    clients: u32,
    operations: u64,
) -> Recorder {
    let shard = ctx.shard;
    let mine = shard.share(u64::from(clients));
    let barrier = Arc::new(Barrier::new(mine as usize));
    let clients = (0..mine).map(|l| shard.global(l) as u32);
    let tasks = spawn_clients(ctx, clients, |client, conn| {
        let (plan, ctx, shared, barrier, sink) = (
            plan.clone(),
            ctx.clone(),
            shared.clone(),
            barrier.clone(),
            sink.clone(),
        );
        async move {
            let mut w = PhaseClient::on(&plan, &ctx, &sink, client, conn);
            if let Err(e) = w.conn.open().await {
                tracing::warn!("fleet client {client} could not connect: {e}");
            }
            tokio::select! {
                () = ctx.stop.cancelled() => return w.rec,
                _ = barrier.wait() => {}
            }
            for k in 0..operations {
                if ctx.stop.is_cancelled() {
                    break;
                }
                let op = u64::from(client) * operations + k + 1;
                run_op!(w, &plan, &ctx, &shared, op, None);
            }
            w.rec
        }
    });
    collect(tasks, ctx.keep_attempts).await
}

/// Starts one worker per client, each `run(client, conn)` on a connection of its own: over
/// HTTP/1.1 a task each; over HTTP/2, the workers that share a connection (`--streams` of them)
/// in one task that also drives that connection (see [`crate::http::http2::drive`]).
fn spawn_clients<F, Fut>(
    ctx: &PhaseCtx,
    clients: impl Iterator<Item = u32>,
    run: F,
) -> Vec<tokio::task::JoinHandle<Vec<Recorder>>>
where
    F: Fn(u32, Conn) -> Fut,
    Fut: std::future::Future<Output = Recorder> + Send + 'static,
{
    let Some(pool) = ctx.target.http2.as_ref() else {
        return clients
            .map(|c| {
                let worker = run(c, Conn::new(ctx.target.clone()));
                tokio::spawn(async move { vec![worker.await] })
            })
            .collect();
    };
    let clients: Vec<u32> = clients.collect();
    // As many driving tasks as there are driving threads (`driving_threads`), each with its
    // share of the connections and a thread of its own: a task per connection made the threads
    // hand connections to each other, park and wake between reads, and write after nearly every
    // read; driving tasks on the shared runtime still moved between its threads.
    let connections = clients.len().div_ceil(pool.streams()).max(1);
    let threads = driving_threads(
        tokio::runtime::Handle::current().metrics().num_workers(),
        ctx.target.addr.ip().is_loopback(),
    );
    let per_task = connections.div_ceil(threads.min(connections)) * pool.streams();
    clients
        .chunks(per_task)
        .map(|share| {
            let workers: Vec<Fut> = share
                .chunks(pool.streams())
                .flat_map(|group| {
                    let slot = Arc::new(Slot::new(ctx.target.clone()));
                    group
                        .iter()
                        .map(|&c| run(c, Conn::H2(H2Conn::on(slot.clone()))))
                        .collect::<Vec<_>>()
                })
                .collect();
            on_a_thread_of_its_own(crate::http::http2::drive(workers))
        })
        .collect()
}

/// The threads set with `--threads`, when they were (see [`set_threads`]).
static THREADS_SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Notes that the process's threads were set (`--threads N`): HTTP/2 loads then drive their
/// connections on that many threads, wherever the target is.
pub fn set_threads(n: usize) {
    let _ = THREADS_SET.set(n.max(1));
}

/// How many threads an HTTP/2 load's connections are driven on: as many as were set with
/// `--threads`; otherwise as many as the runtime has (one per core), but only half of them
/// (rounded up) against a server on this machine (a loopback address), which needs the other
/// cores. A driving thread keeps its connections and sleeps when none has work, so a thread more
/// than the load needs only splits the same work into smaller batches and sleeps and wakes more
/// often; on two cores shared with the server, one thread drove gRPC calls with 0.6–0.8 µs less
/// CPU per call than two, for the same throughput or more (BENCHMARKS.md).
fn driving_threads(runtime: usize, local_target: bool) -> usize {
    match THREADS_SET.get() {
        Some(&n) => n,
        None if local_target => runtime.div_ceil(2),
        None => runtime,
    }
    .max(1)
}

/// Runs `task` on a thread of its own, in a single-threaded runtime: a driving task and its
/// connections then never move between threads (a multi-threaded runtime hands a woken task to
/// whichever thread polled the socket, and wakes a parked thread to steal it).
fn on_a_thread_of_its_own<T: Send + 'static>(
    task: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => tokio::task::spawn_blocking(move || rt.block_on(task)),
        Err(_) => tokio::spawn(task),
    }
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Vec<Recorder>>>, keep: bool) -> Recorder {
    let mut total = Recorder::new(keep);
    for t in tasks {
        match t.await {
            Ok(rs) => rs.iter().for_each(|r| total.merge(r)),
            Err(e) => total.worker_died("a worker", e),
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that panics loses what it measured: the phase's recorder says so with the
    /// panic's message, and the run turns that into an error (exit 3), never a pass.
    #[tokio::test]
    async fn a_worker_that_panics_is_an_error_of_the_run() {
        let ok = tokio::spawn(async {
            let mut r = Recorder::new(false);
            r.sent = 3;
            vec![r]
        });
        let dead: tokio::task::JoinHandle<Vec<Recorder>> =
            tokio::spawn(async { panic!("header map full") });
        let rec = collect(vec![ok, dead], false).await;
        assert_eq!(rec.sent, 3);
        assert_eq!(rec.worker_failures_total, 1);
        assert!(
            rec.worker_failures[0].contains("header map full"),
            "{:?}",
            rec.worker_failures
        );
        let e = crate::run::RunError::worker_died("p", &rec).expect("an error of the run");
        assert!(e.to_string().contains("header map full"), "{e}");
        assert!(crate::run::RunError::worker_died("p", &Recorder::new(false)).is_none());
    }

    #[test]
    fn a_local_target_leaves_half_the_cores_to_its_server() {
        // Nothing in the library sets the threads (the command line does, for `--threads`).
        assert!(THREADS_SET.get().is_none());
        assert_eq!(driving_threads(2, true), 1);
        assert_eq!(driving_threads(3, true), 2);
        assert_eq!(driving_threads(8, true), 4);
        assert_eq!(driving_threads(1, true), 1);
        assert_eq!(driving_threads(2, false), 2);
        assert_eq!(driving_threads(8, false), 8);
    }

    #[test]
    fn constant_and_ramped_schedules() {
        let flat = [(100.0, 100.0, Duration::from_secs(2))];
        assert_eq!(intended_offset(&flat, 0), Some(Duration::ZERO));
        assert_eq!(intended_offset(&flat, 50), Some(Duration::from_millis(500)));
        assert_eq!(intended_offset(&flat, 200), None);
        // Ramp 0 → 100 rps over 2 s: 100 operations, the first half in the last 1.41 s.
        let ramp = [(0.0, 100.0, Duration::from_secs(2))];
        let t50 = intended_offset(&ramp, 50).unwrap().as_secs_f64();
        assert!((t50 - 2f64.sqrt()).abs() < 1e-6, "{t50}");
        assert_eq!(intended_offset(&ramp, 100), None);
        let two = [
            (10.0, 10.0, Duration::from_secs(1)),
            (10.0, 10.0, Duration::from_secs(1)),
        ];
        assert_eq!(intended_offset(&two, 15), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn scheduled_by_counts_the_requests_due_by_a_time() {
        let flat = [(100.0, 100.0, Duration::from_secs(2))];
        assert_eq!(scheduled_by(&flat, Duration::ZERO), 1);
        assert_eq!(scheduled_by(&flat, Duration::from_millis(995)), 100);
        assert_eq!(scheduled_by(&flat, Duration::from_secs(1)), 101);
        assert_eq!(scheduled_by(&flat, Duration::from_secs(60)), 200);
        let ramp = [(0.0, 100.0, Duration::from_secs(2))];
        assert_eq!(scheduled_by(&ramp, Duration::from_secs(60)), 100);
        let million = [(1e6, 1e6, Duration::from_secs(1))];
        assert_eq!(scheduled_by(&million, Duration::from_secs(2)), 1_000_000);
        for t in [0u64, 1, 17, 500, 999] {
            let n = scheduled_by(&million, Duration::from_millis(t));
            assert!(intended_offset(&million, n - 1).unwrap() <= Duration::from_millis(t));
            assert!(intended_offset(&million, n).unwrap() > Duration::from_millis(t));
        }
    }

    /// Runs `pace` on a thread of its own; the returned `Arc` stands for the workers.
    fn pacer(
        stages: Vec<(f64, f64, Duration)>,
        stop: CancellationToken,
    ) -> (Arc<tokio::sync::Semaphore>, std::thread::JoinHandle<()>) {
        let permits = Arc::new(tokio::sync::Semaphore::new(0));
        let (p, start) = (permits.clone(), std::time::Instant::now());
        let h = std::thread::spawn(move || pace(&stages, Shard::WHOLE, start, &p, &stop, 3));
        (permits, h)
    }

    #[test]
    fn the_pacer_releases_every_request_at_its_time_then_one_per_worker() {
        let start = std::time::Instant::now();
        let (permits, h) = pacer(
            vec![(500.0, 500.0, Duration::from_millis(100))],
            CancellationToken::new(),
        );
        h.join().expect("pacer thread");
        // 50 requests, the last due at 98 ms: none is released before its time.
        assert!(start.elapsed() >= Duration::from_millis(98));
        assert_eq!(permits.available_permits(), 50 + 3);
    }

    #[test]
    fn the_pacer_ends_on_stop_and_when_the_workers_are_gone() {
        let stop = CancellationToken::new();
        let hour = vec![(10.0, 10.0, Duration::from_secs(3600))];
        let started = std::time::Instant::now();
        let (permits, h) = pacer(hour.clone(), stop.clone());
        // Until the requests at 0 and 100 ms are out, however late the pacer thread runs.
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while permits.available_permits() < 2 {
            assert!(
                std::time::Instant::now() < give_up,
                "the pacer released nothing"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.cancel();
        h.join().expect("pacer thread");
        // The requests due by then (more if this thread overslept), then one permit per worker
        // to let them end.
        let due = started.elapsed().as_millis() as usize / 100 + 1;
        let released = permits.available_permits() - 3;
        assert!((2..=due).contains(&released), "{released} of {due}");

        let (permits, h) = pacer(hour, CancellationToken::new());
        drop(permits);
        h.join()
            .expect("the pacer notices that nobody waits for it");
    }

    #[test]
    fn keys_are_deterministic_and_distinct() {
        let k = Keys::new(7, false);
        assert_eq!(k.key(0, 1), Keys::new(7, false).key(0, 1));
        assert_ne!(k.key(0, 1), k.key(0, 2));
        assert_ne!(k.key(0, 1), k.key(1, 1));
        assert_ne!(k.key(0, 1), Keys::new(8, false).key(0, 1));
        assert_eq!(k.key(0, 1).len(), 36);
    }
}

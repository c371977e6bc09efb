//! One client of a phase and how it sends: [`PhaseClient`] runs an operation under the phase's
//! retry policy, on its own connection, rendering each attempt from the phase's request template
//! (or sending the request built once, [`PhaseOnce`], when nothing in it changes), a burst
//! member's first attempt released with its round's; what a reply's fields capture for later
//! phases.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rand::rngs::StdRng;
use retry_policy::Limits;

use super::phase::{PhaseCtx, PhaseOnce};
use crate::http::http2::SinglePacketRound;
use crate::http::release::Release as ReleasePoint;
use crate::http::{AttemptError, Conn, Reply, Target};
use crate::metrics::{AttemptIds, Recorder, Sink};
use crate::operation::{execute, execute_grpc, AttemptSpec, GrpcAnswer, GrpcTransport, Transport};
use crate::plan::{GrpcPlan, PhasePlan};
use crate::stop::StopWait;
use crate::template::{RequestTemplate, Var, Vars};
use grpc::call::{AttemptHeaders, CallRequest, CallResponse};
use grpc::frame::DEFAULT_MAX_MESSAGE;
use retry_policy::grpc::Attempt;

impl PhaseOnce {
    /// `plan`'s, for clients with no header of their own.
    pub(super) fn build(plan: &PhasePlan, target: &Arc<Target>) -> PhaseOnce {
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

fn client_header(enabled: bool, phase: u16, client: u32) -> Vec<(HeaderName, HeaderValue)> {
    if !enabled {
        return Vec::new();
    }
    let v = HeaderValue::from_str(&format!("p{phase}-c{client}"))
        .unwrap_or(HeaderValue::from_static("c"));
    vec![(HeaderName::from_static("x-client-id"), v)]
}

/// One client of a phase: its connection, random source, measurements and identity header.
///
/// Laid out in the order written (`repr(C)`): what every call reads first, the random source
/// (drawn from only for a retry's jitter) last, so that a call touches few cache lines of it.
#[repr(C)]
pub(super) struct PhaseClient {
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
    pub(super) conn: Conn,
    pub(super) rec: Recorder,
    rng: StdRng,
}

impl PhaseClient {
    /// Client `client` of the phase, on `conn`, drawing from `rng`.
    pub(super) fn new(
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
    pub(super) fn on(
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
    pub(super) async fn run_grpc(
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
        // Out of flight here, however the operation ended.
        drop(observer);
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
    pub(super) async fn run_http(
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
        // Out of flight here, however the operation ended.
        drop(observer);
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
pub(super) use run_op;

/// How a burst member's first attempt leaves.
#[derive(Clone, Copy)]
pub(super) enum Release<'a> {
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

//! `EnvServer`: serve one [`Env`] over the rlmesh wire protocol (TCP or Unix socket).
//!
//! One connection is one session; the endpoint has one active session at a time (a
//! second client's `Hello` gets `Busy`), while `Ping` and `Shutdown` are answered on
//! any connection. Each connection has its own thread; env calls happen on the
//! session's thread under one lock, with no hop per step. Bad input never panics the
//! server: a protocol error is answered with an `Error` frame and closes that one
//! connection. Shared-memory rings are not offered (`Attach` is declined, the session
//! stays on the socket).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::error::{Error, ErrorCode, Result};
use crate::frame::{Frame, FrameLimits};
use crate::ids;
use crate::msgpack::Mp;
use crate::space::Space;
use crate::transport::{Address, Conn, Listener, RecvError, Stream};
use crate::value::{dict_from_mp, dict_to_mp, DType, InfoDict, Tensor, Value};
use crate::wire::{self, kind, EpisodeRecord, Message, PeerInfo};

/// The id served when [`Env::id`] is `None` (SRV-11).
pub const UNKNOWN_ENV_ID: &str = "UnknownEnv-v1";
/// A connection must say `Hello` within this window.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(30);
/// A peer that reads nothing for this long is dropped.
pub const SEND_DEADLINE: Duration = Duration::from_secs(10);
/// Connections without a session kept at once; a new connection beyond this evicts the
/// oldest one, so strangers holding sockets cannot lock out a legitimate `Hello` or `Ping`.
pub const MAX_PENDING: usize = 64;
const INTERRUPTED_CAP: usize = 100;
/// Info key of conformance warnings (INFO-4).
pub const WARNING_KEY: &str = "rlmesh.conformance.warning";

/// CNF-4: what range deviations do (`RLMESH_VALIDATION_POLICY`): `warn` (default) adds
/// a warning to info once per kind and path per session, `strict` fails the request,
/// `off` skips the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValidationPolicy {
    Warn,
    Strict,
    Off,
}

impl ValidationPolicy {
    /// The policy `RLMESH_VALIDATION_POLICY` selects (`warn` unless `strict` or `off`).
    pub fn from_env() -> ValidationPolicy {
        match std::env::var("RLMESH_VALIDATION_POLICY")
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "strict" => ValidationPolicy::Strict,
            "off" => ValidationPolicy::Off,
            _ => ValidationPolicy::Warn,
        }
    }
}

/// The served autoreset mode (AR-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoresetMode {
    NextStep,
    Disabled,
}

impl AutoresetMode {
    pub fn name(self) -> &'static str {
        match self {
            AutoresetMode::NextStep => "NextStep",
            AutoresetMode::Disabled => "Disabled",
        }
    }
}

/// AR-1: the mode `metadata()["autoreset_mode"]` declares.
fn autoreset_of(metadata: Option<&InfoDict>) -> Result<AutoresetMode> {
    let Some(raw) = metadata.and_then(|m| m.get("autoreset_mode")) else {
        return Ok(AutoresetMode::Disabled);
    };
    match raw.as_str() {
        Some("NextStep") => Ok(AutoresetMode::NextStep),
        Some("Disabled") => Ok(AutoresetMode::Disabled),
        Some("SameStep") => Err(Error::invalid_argument(
            "SAME_STEP autoreset mode is not yet supported by the rlmesh runtime; construct the environment with NEXT_STEP or DISABLED autoreset",
        )),
        _ => Err(Error::invalid_argument(format!(
            "unknown metadata['autoreset_mode'] {raw:?}; expected one of 'NextStep', 'SameStep', 'Disabled'"
        ))),
    }
}

/// Options of a served endpoint.
#[derive(Clone)]
pub struct ServeOptions {
    /// Accept a client's `Shutdown` request (off by default; `RLMESH_ALLOW_REMOTE_SHUTDOWN=1` turns it on).
    pub allow_remote_shutdown: bool,
    /// Frame limits once a session is established.
    pub limits: FrameLimits,
    /// The token every client must send in its `Hello` (compared in constant time; see
    /// docs/security.md). Default: `$RLMESH_TOKEN` when set, else none.
    pub token: Option<String>,
    /// Serve an address other hosts can reach without a token (the explicit opt-out).
    pub insecure_no_auth: bool,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("allow_remote_shutdown", &self.allow_remote_shutdown)
            .field("limits", &self.limits)
            .field("token", &self.token.as_ref().map(|_| "<set>")) // never the token itself
            .field("insecure_no_auth", &self.insecure_no_auth)
            .finish()
    }
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        let env = std::env::var("RLMESH_ALLOW_REMOTE_SHUTDOWN")
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        ServeOptions {
            allow_remote_shutdown: env == "1" || env == "true",
            limits: FrameLimits::DEFAULT,
            token: std::env::var("RLMESH_TOKEN").ok().filter(|t| !t.is_empty()),
            insecure_no_auth: false,
        }
    }
}

/// Whether `given` is `expected`, in time that depends on the lengths only.
fn token_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..b.len() {
        diff |= a.get(i).copied().unwrap_or(0) ^ b[i];
    }
    diff == 0
}

/// Failures from one host answered at once; later ones wait (see [`throttle_delay`]).
pub const FREE_FAILURES: u32 = 3;
/// Hosts whose failures are remembered (the oldest is forgotten first).
pub const MAX_HOSTS: usize = 1024;
const FORGET: Duration = Duration::from_secs(600);

/// Seconds between refusals to a host with `failures` refused tokens so far (0: at once),
/// as the Python server: 1, 2, 4, 8, then 16 s.
pub fn throttle_delay(failures: u32) -> Duration {
    if failures <= FREE_FAILURES {
        return Duration::ZERO;
    }
    Duration::from_secs(1u64 << (failures - FREE_FAILURES - 1).min(4))
}

#[derive(Default)]
struct Strikes {
    hosts: HashMap<String, (u32, Instant, Instant)>, // (failures, last failure, next answer)
    total: u64,
}

impl Strikes {
    /// Record a refusal from `host`: when its answer may go out, and its failures so far.
    fn refused(&mut self, host: &str) -> (Instant, u32) {
        self.total += 1;
        let now = Instant::now();
        if !self.hosts.contains_key(host) && self.hosts.len() >= MAX_HOSTS {
            let oldest = self
                .hosts
                .iter()
                .min_by_key(|(_, (_, last, _))| *last)
                .map(|(h, _)| h.clone());
            if let Some(h) = oldest {
                self.hosts.remove(&h);
            }
        }
        let entry = self.hosts.entry(host.to_owned()).or_insert((0, now, now));
        if now.duration_since(entry.1) > FORGET {
            *entry = (0, now, now);
        }
        entry.0 += 1;
        entry.1 = now;
        let step = throttle_delay(entry.0);
        if step.is_zero() {
            return (now, entry.0);
        }
        let due = entry.2.max(now) + step; // one refusal after the other per host
        entry.2 = due;
        (due, entry.0)
    }
}

/// An env ready to be served; its contract was read once, at construction (RENV-3).
pub struct EnvServer<E: Env> {
    driver: Driver<E>,
    contract: Mp,
    options: ServeOptions,
}

impl<E: Env + Send> EnvServer<E> {
    /// Read the env's spaces, render mode, metadata and id (once) and build the server.
    ///
    /// Fails when `metadata()["autoreset_mode"]` is `"SameStep"` or unknown (AR-1).
    pub fn new(env: E) -> Result<EnvServer<E>> {
        let obs_space = env.observation_space();
        let act_space = env.action_space();
        let metadata = env.metadata();
        let autoreset = autoreset_of(metadata.as_ref())?;
        let contract = Mp::Map(vec![
            (
                Mp::str("id"),
                Mp::Str(
                    env.id()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| UNKNOWN_ENV_ID.to_owned()),
                ),
            ),
            (
                Mp::str("render_mode"),
                env.render_mode()
                    .filter(|s| !s.is_empty())
                    .map(Mp::Str)
                    .unwrap_or(Mp::Nil),
            ),
            (Mp::str("num_envs"), Mp::Int(1)),
            (
                Mp::str("metadata"),
                metadata.as_ref().map(dict_to_mp).unwrap_or(Mp::Nil),
            ),
            (Mp::str("observation_space"), obs_space.to_spec()),
            (Mp::str("action_space"), act_space.to_spec()),
            (Mp::str("autoreset_mode"), Mp::str(autoreset.name())),
        ]);
        Ok(EnvServer {
            driver: Driver::new(env, obs_space, act_space, autoreset),
            contract,
            options: ServeOptions::default(),
        })
    }

    /// Replace the serve options.
    pub fn with_options(mut self, options: ServeOptions) -> EnvServer<E> {
        self.options = options;
        self
    }

    /// Accept (or refuse) clients' `Shutdown` requests.
    pub fn allow_remote_shutdown(mut self, allow: bool) -> EnvServer<E> {
        self.options.allow_remote_shutdown = allow;
        self
    }

    /// Require this token at every handshake (docs/security.md).
    pub fn token(mut self, token: &str) -> EnvServer<E> {
        self.options.token = Some(token.to_owned()).filter(|t| !t.is_empty());
        self
    }

    /// Bind `address` (`127.0.0.1:0` picks a free port; `unix:///path` a Unix socket).
    ///
    /// An address other hosts can reach needs a token ([`EnvServer::token`],
    /// `$RLMESH_TOKEN`) or the explicit opt-out [`ServeOptions::insecure_no_auth`]; without
    /// either, nothing is bound and an invalid-argument error says so.
    pub fn bind(self, address: &str) -> Result<BoundEnvServer<E>> {
        let addr = Address::parse_bind(address)?;
        if self.options.token.is_none() && !self.options.insecure_no_auth && !addr.is_loopback() {
            return Err(Error::invalid_argument(format!(
                "this EnvServer would serve {addr}, which other hosts can reach, without a token: anyone who \
                 can reach the port could drive it. Set a token (EnvServer::token, RLMESH_TOKEN or \
                 --token-file PATH), bind 127.0.0.1 or a unix socket, or opt out explicitly \
                 (ServeOptions {{ insecure_no_auth: true, .. }})"
            )));
        }
        let listener = Listener::bind(&addr)?;
        let local = listener.local_address();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            active: AtomicU64::new(0),
            pending: Mutex::new(BTreeSet::new()),
            streams: Mutex::new(HashMap::new()),
            address: local,
            requests: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            handle_ns: AtomicU64::new(0),
            strikes: Mutex::new(Strikes::default()),
        });
        Ok(BoundEnvServer {
            server: self,
            listener,
            shared,
        })
    }

    /// Bind `address` and serve until stopped: the one-call form.
    pub fn serve(self, address: &str) -> Result<()> {
        self.bind(address)?.serve()
    }
}

struct Shared {
    stop: AtomicBool,
    /// Connection number holding the session (0: none).
    active: AtomicU64,
    /// Connections that have not said `Hello` yet, oldest (lowest number) first.
    pending: Mutex<BTreeSet<u64>>,
    streams: Mutex<HashMap<u64, Stream>>,
    address: Address,
    requests: AtomicU64,
    busy_ns: AtomicU64,
    handle_ns: AtomicU64,
    /// Refused tokens, per host (bounded) and in all.
    strikes: Mutex<Strikes>,
}

impl Shared {
    fn request_stop(&self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // wake the accept loop with a throwaway connection
        let _ = Stream::connect(&self.address, Some(Duration::from_secs(1)));
        for s in lock(&self.streams).values() {
            s.shutdown();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops a running server from another thread.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Ask the server to stop: `serve()` returns once every connection is closed.
    pub fn stop(&self) {
        self.shared.request_stop();
    }

    /// The bound address.
    pub fn local_addr(&self) -> &Address {
        &self.shared.address
    }

    /// Env requests served so far and the server-side time they took.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            requests: self.shared.requests.load(Ordering::Relaxed),
            busy_ns: self.shared.busy_ns.load(Ordering::Relaxed),
            handle_ns: self.shared.handle_ns.load(Ordering::Relaxed),
            auth_failures: lock(&self.shared.strikes).total,
        }
    }
}

/// Server-side timing of Reset/Step/Render requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests answered.
    pub requests: u64,
    /// Total time from a request's last byte read to its reply's last byte written
    /// (decode, env call, bookkeeping, encode and the send syscall).
    pub busy_ns: u64,
    /// The part of `busy_ns` before the send syscall (decode, env call, encode).
    pub handle_ns: u64,
    /// Handshakes and shutdowns refused for a missing or wrong token.
    pub auth_failures: u64,
}

/// A server bound to its address, ready to [`serve`](BoundEnvServer::serve).
pub struct BoundEnvServer<E: Env> {
    server: EnvServer<E>,
    listener: Listener,
    shared: Arc<Shared>,
}

impl<E: Env + Send> BoundEnvServer<E> {
    /// The bound address (the real port when bound to port 0), e.g. `tcp://127.0.0.1:40123`.
    pub fn local_addr(&self) -> &Address {
        &self.shared.address
    }

    /// A handle that stops the server from another thread.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Serve until a remote `Shutdown` (when allowed) or [`ServerHandle::stop`]; then
    /// close the env (`Env::close`).
    pub fn serve(self) -> Result<()> {
        let BoundEnvServer {
            server,
            listener,
            shared,
        } = self;
        let EnvServer {
            driver,
            contract,
            options,
        } = server;
        let core = Core {
            driver: Mutex::new(driver),
            contract,
            options,
        };
        let mut next_conn = 0u64;
        std::thread::scope(|scope| {
            while !shared.stop.load(Ordering::SeqCst) {
                let stream = match listener.accept() {
                    Ok(s) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        // e.g. EMFILE: keep serving what we have
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                next_conn += 1;
                let id = next_conn;
                if let Ok(clone) = stream.try_clone() {
                    lock(&shared.streams).insert(id, clone);
                }
                // As the Python server: past MAX_PENDING the oldest connection without a
                // session is dropped (never the new one, never the active session).
                let evicted: Vec<u64> = {
                    let mut pending = lock(&shared.pending);
                    pending.insert(id);
                    let mut out = Vec::new();
                    while pending.len() > MAX_PENDING {
                        match pending.pop_first() {
                            Some(old) => out.push(old),
                            None => break,
                        }
                    }
                    out
                };
                if !evicted.is_empty() {
                    let streams = lock(&shared.streams);
                    for old in evicted {
                        if let Some(s) = streams.get(&old) {
                            s.shutdown();
                        }
                    }
                }
                let (core, shared) = (&core, &shared);
                let spawned = std::thread::Builder::new()
                    .name(format!("rlmesh-conn-{id}"))
                    .spawn_scoped(scope, move || {
                        let mut session = Session {
                            id,
                            core,
                            shared,
                            conn: Conn::new(stream, FrameLimits::PRE_HANDSHAKE),
                            selected: String::new(),
                            pending: true,
                            sending: None,
                            authenticated: false,
                        };
                        session.run();
                        session.finish();
                    });
                if spawned.is_err() {
                    lock(&shared.pending).remove(&id);
                    if let Some(s) = lock(&shared.streams).remove(&id) {
                        s.shutdown();
                    }
                }
            }
            shared.request_stop();
        });
        drop(listener);
        let mut driver = core.driver.into_inner().unwrap_or_else(|p| p.into_inner());
        match catch_unwind(AssertUnwindSafe(|| driver.env.close())) {
            Ok(r) => r,
            Err(_) => Err(Error::environment("close panicked")),
        }
    }
}

struct Core<E> {
    driver: Mutex<Driver<E>>,
    contract: Mp,
    options: ServeOptions,
}

struct Session<'a, E> {
    id: u64,
    core: &'a Core<E>,
    shared: &'a Shared,
    conn: Conn,
    selected: String,
    pending: bool,
    /// When the current reply's send began (server-side timing).
    sending: Option<Instant>,
    /// Its `Hello` carried the endpoint's token (or none is needed).
    authenticated: bool,
}

enum Flow {
    Continue,
    End,
}

impl<'a, E: Env + Send> Session<'a, E> {
    fn is_active(&self) -> bool {
        self.shared.active.load(Ordering::SeqCst) == self.id
    }

    fn run(&mut self) {
        let _ = self.conn.stream.set_read_timeout(Some(HANDSHAKE_DEADLINE));
        let _ = self.conn.stream.set_write_timeout(Some(SEND_DEADLINE));
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let frame = match self.conn.recv() {
                Ok(f) => f,
                Err(RecvError::Closed) | Err(RecvError::Io(_)) => return,
                Err(RecvError::Protocol(e)) => {
                    self.protocol_error(&e, 0);
                    return;
                }
            };
            let timed = matches!(frame.kind, kind::RESET | kind::STEP | kind::RENDER);
            let started = Instant::now();
            self.sending = None;
            let flow = self.dispatch(frame);
            if timed {
                let done = Instant::now();
                self.shared.requests.fetch_add(1, Ordering::Relaxed);
                self.shared
                    .busy_ns
                    .fetch_add((done - started).as_nanos() as u64, Ordering::Relaxed);
                let handled = self.sending.unwrap_or(done) - started;
                self.shared
                    .handle_ns
                    .fetch_add(handled.as_nanos() as u64, Ordering::Relaxed);
            }
            if let Flow::End = flow {
                return;
            }
        }
    }

    fn finish(&mut self) {
        if self.is_active() {
            lock(&self.core.driver).end_session(); // SES-5: an abrupt end truncates the episode
            self.shared.active.store(0, Ordering::SeqCst);
        }
        if self.pending {
            lock(&self.shared.pending).remove(&self.id);
            self.pending = false;
        }
        lock(&self.shared.streams).remove(&self.id);
        self.conn.stream.shutdown();
    }

    fn send(&mut self, msg: &Message, rid: u32) -> Flow {
        self.send_with(msg, rid, &[] as &[&[u8]])
    }

    fn send_with<S: AsRef<[u8]>>(&mut self, msg: &Message, rid: u32, segments: &[S]) -> Flow {
        self.sending = Some(Instant::now());
        match self.conn.send(msg, rid, segments) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::End,
        }
    }

    fn protocol_error(&mut self, e: &Error, rid: u32) {
        let msg = Message::Error {
            code: ErrorCode::Protocol.number(),
            message: e.message().to_owned(),
            recoverable: false,
            op: String::new(),
        };
        let _ = self.send(&msg, rid);
    }

    fn dispatch(&mut self, frame: Frame) -> Flow {
        let rid = frame.request_id;
        let active = self.is_active();
        let legal = if active {
            matches!(
                frame.kind,
                kind::RESET
                    | kind::STEP
                    | kind::RENDER
                    | kind::CLOSE
                    | kind::SHUTDOWN
                    | kind::PING
                    | kind::CONFIGURE
                    | kind::ATTACH
            )
        } else {
            matches!(frame.kind, kind::HELLO | kind::PING | kind::SHUTDOWN)
        };
        if !legal {
            let name = match wire::kind_name(frame.kind) {
                "unknown message" => format!("kind {:#04x}", frame.kind),
                n => n.to_owned(),
            };
            let state = if active { "READY" } else { "AWAIT_HELLO" };
            self.protocol_error(
                &Error::protocol(format!("{name} is not allowed in session state {state}")),
                rid,
            );
            return Flow::End;
        }
        let msg = match Message::decode(frame.kind, frame.header()) {
            Ok(m) => m,
            Err(e) => {
                self.protocol_error(&e, rid);
                return Flow::End;
            }
        };
        match msg {
            // a probe learns the state (a Rust endpoint serves one session: no counts) and,
            // on an endpoint with a token, whether its own token opens it; a wrong token is a
            // failure like a wrong Hello (counted, throttled, answered with nothing)
            Message::Ping { token } => {
                let auth = match &self.core.options.token {
                    None => "",
                    Some(_) if self.authenticated => "ok",
                    Some(_) if token.is_empty() => "required",
                    Some(_) if self.admits(&token) => "ok",
                    Some(_) => {
                        return self.refuse(rid, &token, "a Ping", |_| Message::Pong {
                            state: String::new(),
                            generation: wire::PROTOCOL_GENERATION.into(),
                            service: "env".into(),
                            sessions: 0,
                            limit: 0,
                            auth: "refused".into(),
                        });
                    }
                };
                let holder = self.shared.active.load(Ordering::SeqCst);
                let state = if holder != 0 && holder != self.id {
                    "busy"
                } else {
                    "ready"
                };
                let pong = Message::Pong {
                    state: state.into(),
                    generation: wire::PROTOCOL_GENERATION.into(),
                    service: "env".into(),
                    sessions: 0,
                    limit: 0,
                    auth: auth.into(),
                };
                self.send(&pong, rid)
            }
            Message::Shutdown { reason, token } => {
                if !self.authenticated && !self.admits(&token) {
                    return self.refuse(rid, &token, "a Shutdown", |message| {
                        Message::ShutdownReply {
                            accepted: false,
                            message,
                        }
                    });
                }
                if !self.core.options.allow_remote_shutdown {
                    let reply = Message::ShutdownReply {
                        accepted: false,
                        message: "remote shutdown is disabled for this environment endpoint".into(),
                    };
                    return self.send(&reply, rid);
                }
                let reason = reason.trim().to_owned();
                let text = if reason.is_empty() {
                    "shutdown accepted".to_owned()
                } else {
                    format!("shutdown accepted: {reason}")
                };
                let _ = self.send(
                    &Message::ShutdownReply {
                        accepted: true,
                        message: text,
                    },
                    rid,
                );
                self.shared.request_stop();
                Flow::End
            }
            Message::Hello {
                generation,
                editions,
                preferred,
                service,
                token,
                ..
            } => {
                if !self.admits(&token) {
                    return self.refuse(rid, &token, "a Hello", |message| Message::Incompatible {
                        message,
                        generation: wire::PROTOCOL_GENERATION.into(),
                        editions: vec![],
                        reason: wire::UNAUTHENTICATED.into(),
                    });
                }
                self.authenticated = true;
                self.hello(rid, &generation, &editions, preferred.as_deref(), &service)
            }
            Message::Attach { .. } => self.send(&Message::AttachReply { attached: false }, rid), // rings are optional: the socket stays
            Message::Close { .. } => {
                let records = lock(&self.core.driver).end_session();
                self.shared.active.store(0, Ordering::SeqCst);
                let _ = self.send(
                    &Message::CloseReply {
                        final_episodes: records,
                    },
                    rid,
                );
                Flow::End
            }
            Message::Configure { edition } => {
                let e = edition.trim();
                if e.is_empty() {
                    return self.send(
                        &Message::ConfigureReply {
                            edition: String::new(),
                        },
                        rid,
                    ); // a no-op (HS-6)
                }
                let base = e.split('-').next().unwrap_or("");
                if base == wire::EDITION && (e == base || e.len() > base.len() + 1) {
                    self.selected = e.to_owned();
                    return self.send(
                        &Message::ConfigureReply {
                            edition: e.to_owned(),
                        },
                        rid,
                    );
                }
                let err = Message::Error {
                    code: ErrorCode::InvalidAction.number(),
                    message: format!("runtime cannot drive workflow edition \"{edition}\"; this build implements [\"{}\"]", wire::EDITION),
                    recoverable: false,
                    op: "configure".into(),
                };
                lock(&self.core.driver).end_session();
                self.shared.active.store(0, Ordering::SeqCst);
                let _ = self.send(&err, rid);
                Flow::End
            }
            Message::Reset { .. } | Message::Step { .. } | Message::Render { .. } => {
                self.env_request(msg, &frame, rid)
            }
            _ => {
                self.protocol_error(&Error::protocol("unexpected message"), rid);
                Flow::End
            }
        }
    }

    /// Whether `given` opens the endpoint (any token when none is set).
    fn admits(&self, given: &str) -> bool {
        match &self.core.options.token {
            None => true,
            Some(expected) => token_matches(given, expected),
        }
    }

    /// Count and log a refused token, wait while the host is throttled, answer, end.
    fn refuse(
        &mut self,
        rid: u32,
        given: &str,
        what: &str,
        reply: impl Fn(String) -> Message,
    ) -> Flow {
        let (host, label) = self.conn.stream.peer();
        let (due, count) = lock(&self.shared.strikes).refused(&host);
        if count <= FREE_FAILURES || count.is_power_of_two() {
            eprintln!(
                "rlmesh: authentication failed: {label} sent {what} with {}; refused (the endpoint keeps serving)",
                if given.is_empty() { "no token" } else { "a wrong token" }
            );
        }
        let why = if given.is_empty() {
            "this endpoint needs a token and the client sent none"
        } else {
            "the token the client sent is not this endpoint's"
        };
        let message = format!(
            "authentication failed: {why}; pass the endpoint's token: token=... on the client, or set \
             RLMESH_TOKEN, or --token-file PATH on the command line"
        );
        let wait = due.saturating_duration_since(Instant::now());
        if wait > HANDSHAKE_DEADLINE {
            return Flow::End; // not worth a socket: no answer at all
        }
        let until = Instant::now() + wait; // this connection's own thread: nobody else waits
        while Instant::now() < until && !self.shared.stop.load(Ordering::SeqCst) {
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        let _ = self.send(&reply(message), rid);
        Flow::End
    }

    fn hello(
        &mut self,
        rid: u32,
        generation: &str,
        editions: &[String],
        preferred: Option<&str>,
        service: &str,
    ) -> Flow {
        let busy = Message::Busy {
            message: "environment already has an active session; only one client may be connected at a time (close the other client first)".into(),
        };
        if self.shared.active.load(Ordering::SeqCst) != 0 {
            let _ = self.send(&busy, rid); // as the Python server: busy before compatibility
            return Flow::End;
        }
        let ours = vec![wire::EDITION.to_owned()];
        let incompatible = |message: String| Message::Incompatible {
            message,
            generation: wire::PROTOCOL_GENERATION.into(),
            editions: ours.clone(),
            reason: String::new(),
        };
        if generation.trim() != wire::PROTOCOL_GENERATION {
            let m = incompatible(format!(
                "protocol generation '{generation}' not compatible with server {}",
                wire::PROTOCOL_GENERATION
            ));
            let _ = self.send(&m, rid);
            return Flow::End;
        }
        if service != "env" {
            let m = incompatible(format!(
                "this endpoint serves the env service; the client asked for the {service} service"
            ));
            let _ = self.send(&m, rid);
            return Flow::End;
        }
        let Some(selected) = wire::select_edition(editions, &ours, &[preferred]) else {
            let m = incompatible(format!("no mutual workflow edition with the env: env offered {ours:?}, the client offered {editions:?}"));
            let _ = self.send(&m, rid);
            return Flow::End;
        };
        if self
            .shared
            .active
            .compare_exchange(0, self.id, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            let _ = self.send(&busy, rid);
            return Flow::End;
        }
        lock(&self.shared.pending).remove(&self.id);
        self.pending = false;
        lock(&self.core.driver).begin_session();
        self.selected = selected.clone();
        self.conn.limits = self.core.options.limits;
        let _ = self.conn.stream.set_read_timeout(None);
        let welcome = Message::Welcome {
            generation: wire::PROTOCOL_GENERATION.into(),
            peer: PeerInfo::this("rlmesh-env"),
            editions: ours.clone(),
            preferred: Some(wire::EDITION.into()),
            selected,
            session_id: ids::uuid4(),
            contract: self.core.contract.clone(),
            capabilities: vec![], // no shared-memory rings: the session stays on the socket
            service: "env".into(),
        };
        self.send(&welcome, rid)
    }

    fn env_request(&mut self, msg: Message, frame: &Frame, rid: u32) -> Flow {
        let (op, timeout_ms) = match &msg {
            Message::Reset { timeout_ms, .. } => ("reset", *timeout_ms),
            Message::Step { timeout_ms, .. } => ("step", *timeout_ms),
            Message::Render { timeout_ms, .. } => ("render", *timeout_ms),
            _ => ("request", 0),
        };
        let started = Instant::now();
        let outcome = {
            let mut driver = lock(&self.core.driver);
            match catch_unwind(AssertUnwindSafe(|| driver.handle(msg, frame))) {
                Ok(r) => r,
                Err(panic) => {
                    let text = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "panic".into());
                    Err(Failure::fatal(format!("{op} task panicked: {text}"), op))
                }
            }
        };
        let outcome = match outcome {
            Ok(r)
                if timeout_ms > 0
                    && started.elapsed() > Duration::from_millis(timeout_ms.max(0) as u64) =>
            {
                drop(r); // SES-4: a late result is dropped
                Err(Failure {
                    code: ErrorCode::Timeout,
                    message: format!("env.{op} timed out after {timeout_ms}ms"),
                    recoverable: true,
                    op,
                })
            }
            other => other,
        };
        match outcome {
            Ok((reply, segments)) => self.send_with(&reply, rid, &segments),
            Err(f) => {
                if !f.recoverable {
                    // end the session before answering, so the client may reconnect at once
                    lock(&self.core.driver).end_session();
                    self.shared.active.store(0, Ordering::SeqCst);
                }
                let err = Message::Error {
                    code: f.code.number(),
                    message: f.message,
                    recoverable: f.recoverable,
                    op: f.op.into(),
                };
                let flow = self.send(&err, rid);
                if f.recoverable {
                    flow
                } else {
                    Flow::End // DELTA-19 / RENV-6: a fatal error ends the session
                }
            }
        }
    }
}

/// A failed request (the `Error` frame's fields).
struct Failure {
    code: ErrorCode,
    message: String,
    recoverable: bool,
    op: &'static str,
}

impl Failure {
    fn new(code: ErrorCode, message: impl Into<String>, op: &'static str) -> Failure {
        Failure {
            code,
            message: message.into(),
            recoverable: code.default_recoverable(),
            op,
        }
    }

    fn fatal(message: impl Into<String>, op: &'static str) -> Failure {
        Failure {
            code: ErrorCode::Internal,
            message: message.into(),
            recoverable: false,
            op,
        }
    }

    /// RENV-6: `{op} failed: {message}`; recoverable only when the env said so.
    fn env(op: &'static str, e: Error) -> Failure {
        let recoverable = e.is_recoverable();
        let code = if recoverable {
            e.code()
        } else {
            ErrorCode::Internal
        };
        Failure {
            code,
            message: format!("{op} failed: {}", e.message()),
            recoverable,
            op,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LaneState {
    Active,
    Pending,
    Idle,
}

/// The episode books of the one lane (AR-4..AR-9).
struct Lane {
    state: LaneState,
    episode_id: String,
    seed: Option<i64>,
    start_ns: i64,
    steps: i64,
    reward: f64,
}

impl Lane {
    fn start(&mut self, episode_id: String, seed: Option<i64>) {
        self.state = LaneState::Active;
        self.episode_id = episode_id;
        self.seed = seed;
        self.start_ns = ids::now_ns();
        self.steps = 0;
        self.reward = 0.0;
    }

    fn record(&self, terminated: bool, truncated: bool, final_info: Mp) -> EpisodeRecord {
        EpisodeRecord {
            episode_id: self.episode_id.clone(),
            seed: self.seed,
            env_index: 0,
            step_count: self.steps,
            cumulative_reward: self.reward,
            terminated,
            truncated,
            start_timestamp_ns: self.start_ns,
            end_timestamp_ns: ids::now_ns(),
            final_info,
        }
    }
}

type Reply = (Message, Vec<Vec<u8>>);

/// Runs requests against the env and keeps the episode books.
struct Driver<E> {
    env: E,
    obs_space: Space,
    act_space: Space,
    autoreset: AutoresetMode,
    lane: Lane,
    interrupted: VecDeque<EpisodeRecord>,
    policy: ValidationPolicy,
    check_obs: bool,
    check_act: bool,
    warned: HashSet<(&'static str, String)>,
    pending_warnings: Vec<(&'static str, String, String)>,
}

fn info_mp(info: &InfoDict) -> Mp {
    if info.is_empty() {
        Mp::Nil
    } else {
        dict_to_mp(info)
    }
}

impl<E: Env> Driver<E> {
    fn new(env: E, obs_space: Space, act_space: Space, autoreset: AutoresetMode) -> Driver<E> {
        let lane = Lane {
            state: LaneState::Idle,
            episode_id: String::new(),
            seed: None,
            start_ns: 0,
            steps: 0,
            reward: 0.0,
        };
        let policy = ValidationPolicy::from_env();
        let on = policy != ValidationPolicy::Off;
        let (check_obs, check_act) = (on && obs_space.has_range(), on && act_space.has_range());
        Driver {
            env,
            obs_space,
            act_space,
            autoreset,
            lane,
            interrupted: VecDeque::new(),
            policy,
            check_obs,
            check_act,
            warned: HashSet::new(),
            pending_warnings: vec![],
        }
    }

    fn begin_session(&mut self) {
        self.lane.state = LaneState::Idle;
        self.interrupted.clear();
        self.warned.clear(); // INFO-4: once per kind and path per session
        self.pending_warnings.clear();
    }

    /// Queue warnings for deviations not yet reported this session (INFO-4).
    fn warn(&mut self, kind: &'static str, deviations: Vec<(String, String)>) {
        for (path, detail) in deviations {
            if self.warned.insert((kind, path.clone())) {
                self.pending_warnings.push((kind, path, detail));
            }
        }
    }

    /// CNF-3/CNF-4 on an observation about to be sent.
    fn check_obs_range<S: AsRef<[u8]>>(
        &mut self,
        scalars: &[Mp],
        segments: &[S],
        op: &'static str,
    ) -> std::result::Result<(), Failure> {
        if !self.check_obs {
            return Ok(());
        }
        let deviations = self.obs_space.range_deviations(scalars, segments);
        if deviations.is_empty() {
            return Ok(());
        }
        if self.policy == ValidationPolicy::Strict {
            let (path, detail) = &deviations[0];
            return Err(Failure::fatal(
                format!("{op} failed: observation out of range at {path}: {detail}"),
                op,
            ));
        }
        self.warn("observation", deviations);
        Ok(())
    }

    /// The reply's info: the env's info plus pending warnings; `nil` when empty.
    fn info_out(&mut self, mut info: InfoDict) -> Mp {
        if !self.pending_warnings.is_empty() {
            let list = self
                .pending_warnings
                .drain(..)
                .map(|(kind, path, detail)| {
                    Value::Dict(
                        InfoDict::new()
                            .with("kind", kind)
                            .with("path", path)
                            .with("detail", detail),
                    )
                })
                .collect();
            info.insert(WARNING_KEY, Value::List(list));
        }
        info_mp(&info)
    }

    fn end_session(&mut self) -> Vec<EpisodeRecord> {
        let mut out: Vec<EpisodeRecord> = self.interrupted.drain(..).collect();
        if self.lane.state == LaneState::Active {
            out.push(self.lane.record(false, true, Mp::Nil));
        }
        self.lane.state = LaneState::Idle;
        out
    }

    fn handle(&mut self, msg: Message, frame: &Frame) -> std::result::Result<Reply, Failure> {
        match msg {
            Message::Reset {
                seeds,
                options,
                episode_ids,
                env_indices,
                ..
            } => self.reset(seeds, options, episode_ids, env_indices),
            Message::Step {
                action,
                episode_ids,
                has_action,
                ..
            } => self.step(action, episode_ids, has_action, frame),
            Message::Render { env_index, .. } => self.render(env_index),
            _ => Err(Failure::new(
                ErrorCode::Unsupported,
                "unsupported request",
                "request",
            )),
        }
    }

    fn encode_obs(
        &self,
        obs: &Value,
        op: &'static str,
    ) -> std::result::Result<(Vec<Mp>, Vec<Vec<u8>>), Failure> {
        match self.obs_space.split(obs) {
            Ok((scalars, segments)) => Ok((scalars, segments.into_iter().map(|s| s.into_owned()).collect())),
            Err(e) => Err(Failure::fatal(format!("{op} failed: the env returned an observation that does not match observation_space at {e}"), op)),
        }
    }

    fn reset(
        &mut self,
        seeds: Vec<Option<i64>>,
        options: Mp,
        episode_ids: Vec<String>,
        env_indices: Vec<i64>,
    ) -> std::result::Result<Reply, Failure> {
        let started = Instant::now();
        if !env_indices.is_empty() {
            return Err(Failure::new(
                ErrorCode::Unsupported,
                "this endpoint does not support partial reset (env_indices)",
                "reset",
            ));
        }
        if seeds.len() > 1 {
            return Err(Failure::new(
                ErrorCode::InvalidAction,
                format!("expected 1 seeds, got {}", seeds.len()),
                "reset",
            ));
        }
        if episode_ids.len() > 1 {
            return Err(Failure::new(
                ErrorCode::InvalidAction,
                format!("expected 1 episode ids, got {}", episode_ids.len()),
                "reset",
            ));
        }
        let options = match &options {
            Mp::Nil => None,
            Mp::Map(_) => Some(dict_from_mp(&options).map_err(|e| {
                Failure::new(
                    ErrorCode::InvalidAction,
                    format!("reset options: {}", e.message()),
                    "reset",
                )
            })?),
            _ => {
                return Err(Failure::new(
                    ErrorCode::InvalidAction,
                    "reset options must be a mapping",
                    "reset",
                ))
            }
        };
        let seed = seeds.first().copied().flatten();
        let (obs, info) = self
            .env
            .reset(seed, options.as_ref())
            .map_err(|e| Failure::env("reset", e))?;
        let (scalars, segments) = self.encode_obs(&obs, "reset")?;
        self.check_obs_range(&scalars, &segments, "reset")?;
        if self.lane.state == LaneState::Active {
            let record = self.lane.record(false, true, Mp::Nil);
            if self.interrupted.len() >= INTERRUPTED_CAP {
                self.interrupted.pop_front();
            }
            self.interrupted.push_back(record);
        }
        let eid = episode_ids.into_iter().next().unwrap_or_else(ids::uuid7);
        self.lane.start(eid, seed);
        let reply = Message::ResetReply {
            obs: scalars,
            info: self.info_out(info),
            endpoint_ns: started.elapsed().as_nanos() as i64,
        };
        Ok((reply, segments))
    }

    fn step(
        &mut self,
        action: Vec<Mp>,
        episode_ids: Vec<(i64, String)>,
        has_action: bool,
        frame: &Frame,
    ) -> std::result::Result<Reply, Failure> {
        let started = Instant::now();
        let action = if has_action {
            let segments = frame.segments();
            match self.act_space.join(&action, &segments) {
                Ok(v) => {
                    if self.check_act {
                        let deviations = self.act_space.range_deviations(&action, &segments);
                        if !deviations.is_empty() {
                            if self.policy == ValidationPolicy::Strict {
                                let (path, detail) = &deviations[0];
                                return Err(Failure::new(
                                    ErrorCode::InvalidAction,
                                    format!("action out of range at {path}: {detail}"),
                                    "step",
                                ));
                            }
                            self.warn("action", deviations);
                        }
                    }
                    Some(v)
                }
                Err(e) => {
                    let sep = if e.starts_with('$') { " at " } else { ": " };
                    return Err(Failure::new(
                        ErrorCode::InvalidAction,
                        format!("action does not match action_space{sep}{e}"),
                        "step",
                    ));
                }
            }
        } else {
            None // ENVCALL-5
        };
        let mut pushed = None;
        for (i, eid) in episode_ids {
            if i == 0 {
                self.lane.episode_id = eid.clone();
                pushed = Some(eid);
            }
        }
        let (obs, reward, terminated, truncated, info) =
            self.env.step(action).map_err(|e| Failure::env("step", e))?;
        let (scalars, segments) = self.encode_obs(&obs, "step")?;
        self.check_obs_range(&scalars, &segments, "step")?;
        let mut completed: Vec<EpisodeRecord> = self.interrupted.drain(..).collect();
        match self.lane.state {
            LaneState::Active => {
                self.lane.steps += 1;
                self.lane.reward += reward;
                if terminated || truncated {
                    completed.push(self.lane.record(terminated, truncated, info_mp(&info)));
                    self.lane.state = if self.autoreset == AutoresetMode::NextStep {
                        LaneState::Pending
                    } else {
                        LaneState::Idle
                    };
                }
            }
            LaneState::Pending => {
                // AR-6: the autoreset step reports reward 0 and not done
                if terminated || truncated || reward != 0.0 {
                    return Err(Failure::fatal(
                        "step failed: NEXT_STEP autoreset contract violated on lane 0: the autoreset step must report reward 0 and not done",
                        "step",
                    ));
                }
                // the client's pushed id (AR-9); a client that pushes none (the Python scalar
                // clients) gets a fresh one rather than the ended episode's
                let eid = pushed.filter(|e| !e.is_empty()).unwrap_or_else(ids::uuid7);
                self.lane.start(eid, None);
            }
            LaneState::Idle => {}
        }
        let reply = Message::StepReply {
            obs: scalars,
            reward,
            terminated,
            truncated,
            info: self.info_out(info),
            completed,
            endpoint_ns: started.elapsed().as_nanos() as i64,
        };
        Ok((reply, segments))
    }

    fn render(&mut self, env_index: i64) -> std::result::Result<Reply, Failure> {
        if env_index != 0 {
            return Err(Failure::new(
                ErrorCode::InvalidAction,
                format!("single-env render only supports env_index 0, got {env_index}"),
                "render",
            ));
        }
        let frame = self.env.render().map_err(|e| Failure::env("render", e))?;
        Ok(match frame.as_ref().and_then(frame_to_hwc_uint8) {
            Some(t) => {
                let shape = t.shape().iter().map(|d| *d as i64).collect();
                (
                    Message::RenderReply {
                        format: Some("raw".into()),
                        shape,
                    },
                    vec![t.into_data()],
                )
            }
            None => (
                Message::RenderReply {
                    format: None,
                    shape: vec![],
                },
                vec![],
            ),
        })
    }
}

/// RND-3 / RENV-4: cast (not clamp) to uint8; CHW becomes HWC; other shapes give no frame.
pub fn frame_to_hwc_uint8(frame: &Value) -> Option<Tensor> {
    let t = frame.as_tensor()?;
    if t.numel() == 0 {
        return None;
    }
    let t = t.cast(DType::U8);
    let s = t.shape().to_vec();
    match s.len() {
        3 if s[2] == 3 || s[2] == 4 => Some(t),
        3 if s[0] == 3 || s[0] == 4 => {
            let (c, h, w) = (s[0], s[1], s[2]);
            let src = t.data();
            let mut out = vec![0u8; c * h * w];
            for ch in 0..c {
                for y in 0..h {
                    for x in 0..w {
                        out[(y * w + x) * c + ch] = src[(ch * h + y) * w + x];
                    }
                }
            }
            Tensor::new(DType::U8, vec![h, w, c], out).ok()
        }
        2 => Some(t),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_frames_are_cast_and_transposed() {
        let chw = Value::tensor(&[3, 1, 2], &[1.0f32, 2.0, 3.0, 4.0, 300.0, 6.0]);
        let t = frame_to_hwc_uint8(&chw).unwrap();
        assert_eq!(t.shape(), &[1, 2, 3]);
        assert_eq!(t.data(), &[1, 3, 44, 2, 4, 6]);
        assert_eq!(
            frame_to_hwc_uint8(&Value::tensor(&[2, 2], &[1u8, 2, 3, 4]))
                .unwrap()
                .shape(),
            &[2, 2]
        );
        assert!(frame_to_hwc_uint8(&Value::tensor(&[2, 2, 2], &[0u8; 8])).is_none());
        assert!(frame_to_hwc_uint8(&Value::tensor(&[4], &[0u8; 4])).is_none());
        assert!(frame_to_hwc_uint8(&Value::Int(3)).is_none());
    }

    #[test]
    fn autoreset_mode_comes_from_metadata() {
        let md = |v: &str| InfoDict::new().with("autoreset_mode", v);
        assert_eq!(autoreset_of(None).unwrap(), AutoresetMode::Disabled);
        assert_eq!(
            autoreset_of(Some(&InfoDict::new())).unwrap(),
            AutoresetMode::Disabled
        );
        assert_eq!(
            autoreset_of(Some(&md("NextStep"))).unwrap(),
            AutoresetMode::NextStep
        );
        assert!(autoreset_of(Some(&md("SameStep")))
            .unwrap_err()
            .to_string()
            .contains("SAME_STEP"));
        assert!(autoreset_of(Some(&md("Sometimes"))).is_err());
        assert!(autoreset_of(Some(&InfoDict::new().with("autoreset_mode", Value::None))).is_err());
    }
}

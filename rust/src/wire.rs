//! Message headers (docs/protocol.md §4): each message is a msgpack array of its
//! fields in order. Writers write every field; readers accept extra trailing fields
//! and default missing trailing ones, exactly as the Python reference (msgspec
//! `array_like` structs) does.

use crate::error::{Error, Result};
use crate::msgpack::{self, Mp};

pub const PROTOCOL_GENERATION: &str = "rlmesh-py-v1";
/// `Incompatible.reason` of a missing or wrong token.
pub const UNAUTHENTICATED: &str = "unauthenticated";
pub const EDITION: &str = "2026.06";
pub const PACKAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod kind {
    pub const HELLO: u8 = 0x01;
    pub const RESET: u8 = 0x02;
    pub const STEP: u8 = 0x03;
    pub const RENDER: u8 = 0x04;
    pub const CLOSE: u8 = 0x05;
    pub const SHUTDOWN: u8 = 0x06;
    pub const PING: u8 = 0x07;
    pub const CONFIGURE: u8 = 0x08;
    pub const ATTACH: u8 = 0x09;
    pub const WELCOME: u8 = 0x81;
    pub const BUSY: u8 = 0x82;
    pub const INCOMPATIBLE: u8 = 0x83;
    pub const RESET_REPLY: u8 = 0x84;
    pub const STEP_REPLY: u8 = 0x85;
    pub const RENDER_REPLY: u8 = 0x86;
    pub const CLOSE_REPLY: u8 = 0x87;
    pub const SHUTDOWN_REPLY: u8 = 0x88;
    pub const PONG: u8 = 0x89;
    pub const CONFIGURE_REPLY: u8 = 0x8A;
    pub const ATTACH_REPLY: u8 = 0x8B;
    pub const ERROR: u8 = 0xFF;
}

/// Ordered `{str: str}` maps (capabilities, framework versions).
pub type StrMap = Vec<(String, String)>;

/// Advisory diagnostics about a peer; never affects compatibility.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PeerInfo {
    pub component: String,
    pub package_version: String,
    pub language: String,
    pub language_version: String,
    pub os: String,
    pub os_version: String,
    pub arch: String,
    pub framework_versions: StrMap,
    pub extra: StrMap,
}

impl PeerInfo {
    /// This process as a Rust peer.
    pub fn this(component: &str) -> PeerInfo {
        PeerInfo {
            component: component.to_owned(),
            package_version: PACKAGE_VERSION.to_owned(),
            language: "rust".to_owned(),
            language_version: String::new(),
            os: std::env::consts::OS.to_owned(),
            os_version: String::new(),
            arch: std::env::consts::ARCH.to_owned(),
            framework_versions: vec![],
            extra: vec![("rlmesh.implementation".to_owned(), "rlmesh-rs".to_owned())],
        }
    }
}

/// One completed episode's bookkeeping (AR-7).
#[derive(Clone, Debug, PartialEq)]
pub struct EpisodeRecord {
    pub episode_id: String,
    pub seed: Option<i64>,
    pub env_index: i64,
    pub step_count: i64,
    pub cumulative_reward: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub start_timestamp_ns: i64,
    pub end_timestamp_ns: i64,
    pub final_info: Mp,
}

/// Every message of the env service.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// `token`: the endpoint's token (`""`: none; then the field is not sent at all, so a
    /// `Hello` without one is byte for byte what it always was).
    Hello {
        generation: String,
        peer: PeerInfo,
        editions: Vec<String>,
        preferred: Option<String>,
        capabilities: StrMap,
        service: String,
        token: String,
    },
    Welcome {
        generation: String,
        peer: PeerInfo,
        editions: Vec<String>,
        preferred: Option<String>,
        selected: String,
        session_id: String,
        contract: Mp,
        capabilities: StrMap,
        service: String,
    },
    Busy {
        message: String,
    },
    /// `reason`: `""` (generation, edition or service) or [`UNAUTHENTICATED`] (a missing
    /// or wrong token); sent only when not empty.
    Incompatible {
        message: String,
        generation: String,
        editions: Vec<String>,
        reason: String,
    },
    Reset {
        seeds: Vec<Option<i64>>,
        options: Mp,
        episode_ids: Vec<String>,
        env_indices: Vec<i64>,
        timeout_ms: i64,
        seed_int: bool,
    },
    ResetReply {
        obs: Vec<Mp>,
        info: Mp,
        endpoint_ns: i64,
    },
    Step {
        action: Vec<Mp>,
        episode_ids: Vec<(i64, String)>,
        timeout_ms: i64,
        has_action: bool,
    },
    StepReply {
        obs: Vec<Mp>,
        reward: f64,
        terminated: bool,
        truncated: bool,
        info: Mp,
        completed: Vec<EpisodeRecord>,
        endpoint_ns: i64,
    },
    Render {
        env_index: i64,
        timeout_ms: i64,
    },
    RenderReply {
        format: Option<String>,
        shape: Vec<i64>,
    },
    Close {
        reason: String,
    },
    CloseReply {
        final_episodes: Vec<EpisodeRecord>,
    },
    /// `token`: before a `Hello`, an endpoint that needs a token accepts a `Shutdown` only
    /// with it (sent only when not empty).
    Shutdown {
        reason: String,
        token: String,
    },
    ShutdownReply {
        accepted: bool,
        message: String,
    },
    /// `token`: sent only when not empty (a probe's session counts may need it).
    Ping {
        token: String,
    },
    /// `sessions`, `limit` and `auth` are trailing fields a multi-session or token-protected
    /// endpoint adds (all sent when any is set; `auth`: `""`, `"required"`, `"ok"`, `"refused"`).
    Pong {
        state: String,
        generation: String,
        service: String,
        sessions: i64,
        limit: i64,
        auth: String,
    },
    Configure {
        edition: String,
    },
    ConfigureReply {
        edition: String,
    },
    Attach {
        path: String,
    },
    AttachReply {
        attached: bool,
    },
    Error {
        code: i64,
        message: String,
        recoverable: bool,
        op: String,
    },
}

fn s(v: &str) -> Mp {
    Mp::Str(v.to_owned())
}
fn strs(v: &[String]) -> Mp {
    Mp::Array(v.iter().map(|x| s(x)).collect())
}
fn strmap(v: &StrMap) -> Mp {
    Mp::Map(v.iter().map(|(k, x)| (s(k), s(x))).collect())
}
fn opt_str(v: &Option<String>) -> Mp {
    v.as_deref().map(s).unwrap_or(Mp::Nil)
}

fn peer_mp(p: &PeerInfo) -> Mp {
    Mp::Array(vec![
        s(&p.component),
        s(&p.package_version),
        s(&p.language),
        s(&p.language_version),
        s(&p.os),
        s(&p.os_version),
        s(&p.arch),
        strmap(&p.framework_versions),
        strmap(&p.extra),
    ])
}

pub(crate) fn record_mp(r: &EpisodeRecord) -> Mp {
    Mp::Array(vec![
        s(&r.episode_id),
        r.seed.map(Mp::Int).unwrap_or(Mp::Nil),
        Mp::Int(r.env_index),
        Mp::Int(r.step_count),
        Mp::Float(r.cumulative_reward),
        Mp::Bool(r.terminated),
        Mp::Bool(r.truncated),
        Mp::Int(r.start_timestamp_ns),
        Mp::Int(r.end_timestamp_ns),
        r.final_info.clone(),
    ])
}

impl Message {
    /// The frame kind byte.
    pub fn kind(&self) -> u8 {
        use kind::*;
        match self {
            Message::Hello { .. } => HELLO,
            Message::Welcome { .. } => WELCOME,
            Message::Busy { .. } => BUSY,
            Message::Incompatible { .. } => INCOMPATIBLE,
            Message::Reset { .. } => RESET,
            Message::ResetReply { .. } => RESET_REPLY,
            Message::Step { .. } => STEP,
            Message::StepReply { .. } => STEP_REPLY,
            Message::Render { .. } => RENDER,
            Message::RenderReply { .. } => RENDER_REPLY,
            Message::Close { .. } => CLOSE,
            Message::CloseReply { .. } => CLOSE_REPLY,
            Message::Shutdown { .. } => SHUTDOWN,
            Message::ShutdownReply { .. } => SHUTDOWN_REPLY,
            Message::Ping { .. } => PING,
            Message::Pong { .. } => PONG,
            Message::Configure { .. } => CONFIGURE,
            Message::ConfigureReply { .. } => CONFIGURE_REPLY,
            Message::Attach { .. } => ATTACH,
            Message::AttachReply { .. } => ATTACH_REPLY,
            Message::Error { .. } => ERROR,
        }
    }

    /// The header as a msgpack array of fields in order.
    pub fn to_mp(&self) -> Mp {
        Mp::Array(match self {
            Message::Hello {
                generation,
                peer,
                editions,
                preferred,
                capabilities,
                service,
                token,
            } => {
                let mut v = vec![
                    s(generation),
                    peer_mp(peer),
                    strs(editions),
                    opt_str(preferred),
                    strmap(capabilities),
                    s(service),
                ];
                if !token.is_empty() {
                    v.push(s(token));
                }
                v
            }
            Message::Welcome {
                generation,
                peer,
                editions,
                preferred,
                selected,
                session_id,
                contract,
                capabilities,
                service,
            } => vec![
                s(generation),
                peer_mp(peer),
                strs(editions),
                opt_str(preferred),
                s(selected),
                s(session_id),
                contract.clone(),
                strmap(capabilities),
                s(service),
            ],
            Message::Busy { message } => vec![s(message)],
            Message::Incompatible {
                message,
                generation,
                editions,
                reason,
            } => {
                let mut v = vec![s(message), s(generation), strs(editions)];
                if !reason.is_empty() {
                    v.push(s(reason));
                }
                v
            }
            Message::Reset {
                seeds,
                options,
                episode_ids,
                env_indices,
                timeout_ms,
                seed_int,
            } => vec![
                Mp::Array(
                    seeds
                        .iter()
                        .map(|x| x.map(Mp::Int).unwrap_or(Mp::Nil))
                        .collect(),
                ),
                options.clone(),
                strs(episode_ids),
                Mp::Array(env_indices.iter().map(|i| Mp::Int(*i)).collect()),
                Mp::Int(*timeout_ms),
                Mp::Bool(*seed_int),
            ],
            Message::ResetReply {
                obs,
                info,
                endpoint_ns,
            } => vec![Mp::Array(obs.clone()), info.clone(), Mp::Int(*endpoint_ns)],
            Message::Step {
                action,
                episode_ids,
                timeout_ms,
                has_action,
            } => vec![
                Mp::Array(action.clone()),
                Mp::Map(
                    episode_ids
                        .iter()
                        .map(|(i, e)| (Mp::Int(*i), s(e)))
                        .collect(),
                ),
                Mp::Int(*timeout_ms),
                Mp::Bool(*has_action),
            ],
            Message::StepReply {
                obs,
                reward,
                terminated,
                truncated,
                info,
                completed,
                endpoint_ns,
            } => vec![
                Mp::Array(obs.clone()),
                Mp::Float(*reward),
                Mp::Bool(*terminated),
                Mp::Bool(*truncated),
                info.clone(),
                Mp::Array(completed.iter().map(record_mp).collect()),
                Mp::Int(*endpoint_ns),
            ],
            Message::Render {
                env_index,
                timeout_ms,
            } => vec![Mp::Int(*env_index), Mp::Int(*timeout_ms)],
            Message::RenderReply { format, shape } => vec![
                opt_str(format),
                Mp::Array(shape.iter().map(|d| Mp::Int(*d)).collect()),
            ],
            Message::Close { reason } => vec![s(reason)],
            Message::CloseReply { final_episodes } => {
                vec![Mp::Array(final_episodes.iter().map(record_mp).collect())]
            }
            Message::Shutdown { reason, token } => {
                let mut v = vec![s(reason)];
                if !token.is_empty() {
                    v.push(s(token));
                }
                v
            }
            Message::ShutdownReply { accepted, message } => vec![Mp::Bool(*accepted), s(message)],
            Message::Ping { token } => {
                if token.is_empty() {
                    vec![]
                } else {
                    vec![s(token)]
                }
            }
            Message::Pong {
                state,
                generation,
                service,
                sessions,
                limit,
                auth,
            } => {
                let mut v = vec![s(state), s(generation), s(service)];
                if *sessions != 0 || *limit != 0 || !auth.is_empty() {
                    v.push(Mp::Int(*sessions));
                    v.push(Mp::Int(*limit));
                }
                if !auth.is_empty() {
                    v.push(s(auth));
                }
                v
            }
            Message::Configure { edition } => vec![s(edition)],
            Message::ConfigureReply { edition } => vec![s(edition)],
            Message::Attach { path } => vec![s(path)],
            Message::AttachReply { attached } => vec![Mp::Bool(*attached)],
            Message::Error {
                code,
                message,
                recoverable,
                op,
            } => vec![Mp::Int(*code), s(message), Mp::Bool(*recoverable), s(op)],
        })
    }

    /// The encoded header bytes.
    pub fn header(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.write_header(&mut out);
        out
    }

    /// Append the encoded header to `out`; the per-step messages are written field by
    /// field, without building a msgpack tree first (same bytes as [`to_mp`](Message::to_mp)).
    pub fn write_header(&self, out: &mut Vec<u8>) {
        use msgpack::{
            encode, write_array_len, write_bool, write_f64, write_int, write_map_len, write_str,
        };
        match self {
            Message::StepReply {
                obs,
                reward,
                terminated,
                truncated,
                info,
                completed,
                endpoint_ns,
            } => {
                write_array_len(out, 7);
                write_array_len(out, obs.len());
                obs.iter().for_each(|o| encode(o, out));
                write_f64(out, *reward);
                write_bool(out, *terminated);
                write_bool(out, *truncated);
                encode(info, out);
                write_array_len(out, completed.len());
                completed.iter().for_each(|r| encode(&record_mp(r), out));
                write_int(out, *endpoint_ns);
            }
            Message::ResetReply {
                obs,
                info,
                endpoint_ns,
            } => {
                write_array_len(out, 3);
                write_array_len(out, obs.len());
                obs.iter().for_each(|o| encode(o, out));
                encode(info, out);
                write_int(out, *endpoint_ns);
            }
            Message::Step {
                action,
                episode_ids,
                timeout_ms,
                has_action,
            } => {
                write_array_len(out, 4);
                write_array_len(out, action.len());
                action.iter().for_each(|a| encode(a, out));
                write_map_len(out, episode_ids.len());
                for (i, e) in episode_ids {
                    write_int(out, *i);
                    write_str(out, e);
                }
                write_int(out, *timeout_ms);
                write_bool(out, *has_action);
            }
            other => encode(&other.to_mp(), out),
        }
    }

    /// Decode the header of a frame of `kind`.
    pub fn decode(kind: u8, header: &[u8]) -> Result<Message> {
        let name = kind_name(kind);
        let mp = msgpack::decode(header)
            .map_err(|e| Error::protocol(format!("malformed {name} header: {e}")))?;
        let Mp::Array(items) = mp else {
            return Err(Error::protocol(format!(
                "malformed {name} header: expected an array"
            )));
        };
        let f = Fields {
            items: &items,
            name,
        };
        use kind::*;
        Ok(match kind {
            HELLO => Message::Hello {
                generation: f.str(0, None)?,
                peer: f.peer(1)?,
                editions: f.strs(2, false)?,
                preferred: f.opt_str(3)?,
                capabilities: f.strmap(4)?,
                service: f.str(5, Some("env"))?,
                token: f.str(6, Some(""))?,
            },
            WELCOME => Message::Welcome {
                generation: f.str(0, None)?,
                peer: f.peer(1)?,
                editions: f.strs(2, false)?,
                preferred: f.opt_str_required(3)?,
                selected: f.str(4, None)?,
                session_id: f.str(5, None)?,
                contract: match f.items.get(6) {
                    None => Mp::Map(vec![]),
                    Some(m @ Mp::Map(_)) => m.clone(),
                    Some(_) => return Err(f.bad(6, "a map")),
                },
                capabilities: f.strmap(7)?,
                service: f.str(8, Some("env"))?,
            },
            BUSY => Message::Busy {
                message: f.str(0, None)?,
            },
            INCOMPATIBLE => Message::Incompatible {
                message: f.str(0, None)?,
                generation: f.str(1, Some(""))?,
                editions: f.strs(2, true)?,
                reason: f.str(3, Some(""))?,
            },
            RESET => Message::Reset {
                seeds: match f.items.first() {
                    None => vec![],
                    Some(Mp::Array(a)) => a
                        .iter()
                        .map(|v| match v {
                            Mp::Nil => Ok(None),
                            Mp::Int(i) => Ok(Some(*i)),
                            _ => Err(f.bad(0, "a list of int or nil")),
                        })
                        .collect::<Result<_>>()?,
                    Some(_) => return Err(f.bad(0, "a list")),
                },
                options: f.any(1),
                episode_ids: f.strs(2, true)?,
                env_indices: f.ints(3)?,
                timeout_ms: f.int(4, Some(0))?,
                seed_int: f.bool(5, Some(false))?,
            },
            RESET_REPLY => Message::ResetReply {
                obs: f.list(0, None)?,
                info: f.any(1),
                endpoint_ns: f.int(2, Some(0))?,
            },
            STEP => Message::Step {
                action: f.list(0, None)?,
                episode_ids: match f.items.get(1) {
                    None => vec![],
                    Some(Mp::Map(entries)) => entries
                        .iter()
                        .map(|(k, v)| match (k, v) {
                            (Mp::Int(i), Mp::Str(e)) => Ok((*i, e.clone())),
                            _ => Err(f.bad(1, "a map of int to str")),
                        })
                        .collect::<Result<_>>()?,
                    Some(_) => return Err(f.bad(1, "a map")),
                },
                timeout_ms: f.int(2, Some(0))?,
                has_action: f.bool(3, Some(true))?,
            },
            STEP_REPLY => Message::StepReply {
                obs: f.list(0, None)?,
                reward: f.float(1, Some(0.0))?,
                terminated: f.bool(2, Some(false))?,
                truncated: f.bool(3, Some(false))?,
                info: f.any(4),
                completed: f.records(5)?,
                endpoint_ns: f.int(6, Some(0))?,
            },
            RENDER => Message::Render {
                env_index: f.int(0, Some(0))?,
                timeout_ms: f.int(1, Some(0))?,
            },
            RENDER_REPLY => Message::RenderReply {
                format: f.opt_str(0)?,
                shape: f.ints(1)?,
            },
            CLOSE => Message::Close {
                reason: f.str(0, Some(""))?,
            },
            CLOSE_REPLY => Message::CloseReply {
                final_episodes: f.records(0)?,
            },
            SHUTDOWN => Message::Shutdown {
                reason: f.str(0, Some("owner shutdown"))?,
                token: f.str(1, Some(""))?,
            },
            SHUTDOWN_REPLY => Message::ShutdownReply {
                accepted: f.bool(0, None)?,
                message: f.str(1, None)?,
            },
            PING => Message::Ping {
                token: f.str(0, Some(""))?,
            },
            PONG => Message::Pong {
                state: f.str(0, None)?,
                generation: f.str(1, Some(""))?,
                service: f.str(2, Some("env"))?,
                sessions: f.int(3, Some(0))?,
                limit: f.int(4, Some(0))?,
                auth: f.str(5, Some(""))?,
            },
            CONFIGURE => Message::Configure {
                edition: f.str(0, None)?,
            },
            CONFIGURE_REPLY => Message::ConfigureReply {
                edition: f.str(0, None)?,
            },
            ATTACH => Message::Attach {
                path: f.str(0, None)?,
            },
            ATTACH_REPLY => Message::AttachReply {
                attached: f.bool(0, None)?,
            },
            ERROR => Message::Error {
                code: f.int(0, None)?,
                message: f.str(1, None)?,
                recoverable: f.bool(2, None)?,
                op: f.str(3, Some(""))?,
            },
            other => {
                return Err(Error::protocol(format!(
                    "unknown message kind {other:#04x}"
                )))
            }
        })
    }
}

/// The message name of a kind byte (for error messages).
pub fn kind_name(kind: u8) -> &'static str {
    use kind::*;
    match kind {
        HELLO => "Hello",
        RESET => "Reset",
        STEP => "Step",
        RENDER => "Render",
        CLOSE => "Close",
        SHUTDOWN => "Shutdown",
        PING => "Ping",
        CONFIGURE => "Configure",
        ATTACH => "Attach",
        WELCOME => "Welcome",
        BUSY => "Busy",
        INCOMPATIBLE => "Incompatible",
        RESET_REPLY => "ResetReply",
        STEP_REPLY => "StepReply",
        RENDER_REPLY => "RenderReply",
        CLOSE_REPLY => "CloseReply",
        SHUTDOWN_REPLY => "ShutdownReply",
        PONG => "Pong",
        CONFIGURE_REPLY => "ConfigureReply",
        ATTACH_REPLY => "AttachReply",
        ERROR => "Error",
        _ => "unknown message",
    }
}

struct Fields<'a> {
    items: &'a [Mp],
    name: &'static str,
}

impl<'a> Fields<'a> {
    fn bad(&self, i: usize, what: &str) -> Error {
        Error::protocol(format!(
            "malformed {} header: field {i} must be {what}",
            self.name
        ))
    }

    fn missing(&self, i: usize) -> Error {
        Error::protocol(format!(
            "malformed {} header: required field {i} is missing",
            self.name
        ))
    }

    fn str(&self, i: usize, default: Option<&str>) -> Result<String> {
        match (self.items.get(i), default) {
            (Some(Mp::Str(v)), _) => Ok(v.clone()),
            (Some(_), _) => Err(self.bad(i, "a str")),
            (None, Some(d)) => Ok(d.to_owned()),
            (None, None) => Err(self.missing(i)),
        }
    }

    fn opt_str(&self, i: usize) -> Result<Option<String>> {
        match self.items.get(i) {
            None | Some(Mp::Nil) => Ok(None),
            Some(Mp::Str(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.bad(i, "a str or nil")),
        }
    }

    fn opt_str_required(&self, i: usize) -> Result<Option<String>> {
        if self.items.len() <= i {
            return Err(self.missing(i));
        }
        self.opt_str(i)
    }

    fn int(&self, i: usize, default: Option<i64>) -> Result<i64> {
        match (self.items.get(i), default) {
            (Some(Mp::Int(v)), _) => Ok(*v),
            (Some(_), _) => Err(self.bad(i, "an int")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(self.missing(i)),
        }
    }

    fn float(&self, i: usize, default: Option<f64>) -> Result<f64> {
        match (self.items.get(i), default) {
            (Some(Mp::Float(v)), _) => Ok(*v),
            (Some(Mp::Int(v)), _) => Ok(*v as f64),
            (Some(_), _) => Err(self.bad(i, "a float")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(self.missing(i)),
        }
    }

    fn bool(&self, i: usize, default: Option<bool>) -> Result<bool> {
        match (self.items.get(i), default) {
            (Some(Mp::Bool(v)), _) => Ok(*v),
            (Some(_), _) => Err(self.bad(i, "a bool")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(self.missing(i)),
        }
    }

    fn any(&self, i: usize) -> Mp {
        self.items.get(i).cloned().unwrap_or(Mp::Nil)
    }

    fn list(&self, i: usize, default: Option<()>) -> Result<Vec<Mp>> {
        match (self.items.get(i), default) {
            (Some(Mp::Array(v)), _) => Ok(v.clone()),
            (Some(_), _) => Err(self.bad(i, "a list")),
            (None, Some(())) => Ok(vec![]),
            (None, None) => Err(self.missing(i)),
        }
    }

    fn strs(&self, i: usize, optional: bool) -> Result<Vec<String>> {
        match self.items.get(i) {
            None if optional => Ok(vec![]),
            None => Err(self.missing(i)),
            Some(Mp::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| self.bad(i, "a list of str"))
                })
                .collect(),
            Some(_) => Err(self.bad(i, "a list of str")),
        }
    }

    fn ints(&self, i: usize) -> Result<Vec<i64>> {
        match self.items.get(i) {
            None => Ok(vec![]),
            Some(Mp::Array(a)) => a
                .iter()
                .map(|v| v.as_i64().ok_or_else(|| self.bad(i, "a list of int")))
                .collect(),
            Some(_) => Err(self.bad(i, "a list of int")),
        }
    }

    fn strmap(&self, i: usize) -> Result<StrMap> {
        strmap_of(self.items.get(i)).ok_or_else(|| self.bad(i, "a map of str to str"))
    }

    fn peer(&self, i: usize) -> Result<PeerInfo> {
        let Some(Mp::Array(p)) = self.items.get(i) else {
            return Err(if self.items.len() <= i {
                self.missing(i)
            } else {
                self.bad(i, "a PeerInfo array")
            });
        };
        let g = |j: usize, d: &str| -> Result<String> {
            match p.get(j) {
                None => Ok(d.to_owned()),
                Some(Mp::Str(v)) => Ok(v.clone()),
                Some(_) => Err(self.bad(i, "a PeerInfo of strings")),
            }
        };
        Ok(PeerInfo {
            component: g(0, "")?,
            package_version: g(1, "")?,
            language: g(2, "python")?,
            language_version: g(3, "")?,
            os: g(4, "")?,
            os_version: g(5, "")?,
            arch: g(6, "")?,
            framework_versions: strmap_of(p.get(7)).ok_or_else(|| self.bad(i, "a PeerInfo"))?,
            extra: strmap_of(p.get(8)).ok_or_else(|| self.bad(i, "a PeerInfo"))?,
        })
    }

    fn records(&self, i: usize) -> Result<Vec<EpisodeRecord>> {
        match self.items.get(i) {
            None => Ok(vec![]),
            Some(Mp::Array(a)) => a
                .iter()
                .map(|r| record_of(r).ok_or_else(|| self.bad(i, "a list of EpisodeRecord")))
                .collect(),
            Some(_) => Err(self.bad(i, "a list")),
        }
    }
}

fn strmap_of(m: Option<&Mp>) -> Option<StrMap> {
    match m {
        None => Some(vec![]),
        Some(Mp::Map(entries)) => entries
            .iter()
            .map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
            .collect(),
        Some(_) => None,
    }
}

fn record_of(m: &Mp) -> Option<EpisodeRecord> {
    let a = m.as_array()?;
    if a.len() < 9 {
        return None;
    }
    Some(EpisodeRecord {
        episode_id: a[0].as_str()?.to_owned(),
        seed: match &a[1] {
            Mp::Nil => None,
            v => Some(v.as_i64()?),
        },
        env_index: a[2].as_i64()?,
        step_count: a[3].as_i64()?,
        cumulative_reward: a[4].as_f64()?,
        terminated: a[5].as_bool()?,
        truncated: a[6].as_bool()?,
        start_timestamp_ns: a[7].as_i64()?,
        end_timestamp_ns: a[8].as_i64()?,
        final_info: a.get(9).cloned().unwrap_or(Mp::Nil),
    })
}

// -- editions (HS-3/HS-4) -------------------------------------------------------------------

/// Ordering key of an edition: base, then a suffixed cohort above its bare base, then suffix.
pub fn edition_key(name: &str) -> (String, u8, String) {
    let name = name.trim();
    match name.split_once('-') {
        Some((base, suffix)) => (base.to_owned(), 1, suffix.to_owned()),
        None => (name.to_owned(), 0, String::new()),
    }
}

/// The highest edition present in both offers and at or below every ceiling.
pub fn select_edition(a: &[String], b: &[String], ceilings: &[Option<&str>]) -> Option<String> {
    let mut common: Vec<String> = a
        .iter()
        .map(|x| x.trim().to_owned())
        .filter(|x| !x.is_empty() && b.iter().any(|y| y.trim() == x))
        .collect();
    for c in ceilings.iter().flatten() {
        if !c.is_empty() {
            let ck = edition_key(c);
            common.retain(|x| edition_key(x) <= ck);
        }
    }
    common
        .into_iter()
        .max_by(|x, y| edition_key(x).cmp(&edition_key(y)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editions_select_the_highest_mutual_one_under_the_ceilings() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            select_edition(&v(&["2026.06"]), &v(&["2026.06", "2025.12"]), &[]),
            Some("2026.06".into())
        );
        assert_eq!(
            select_edition(
                &v(&["2026.06", "2025.12"]),
                &v(&["2026.06", "2025.12"]),
                &[Some("2025.12")]
            ),
            Some("2025.12".into())
        );
        assert_eq!(
            select_edition(
                &v(&["2026.06-0.1.0-rc.5", "2026.06"]),
                &v(&["2026.06-0.1.0-rc.5", "2026.06"]),
                &[]
            ),
            Some("2026.06-0.1.0-rc.5".into())
        );
        assert_eq!(
            select_edition(&v(&["2027.01"]), &v(&["2026.06"]), &[]),
            None
        );
    }

    #[test]
    fn every_message_round_trips() {
        let rec = EpisodeRecord {
            episode_id: "e".into(),
            seed: Some(3),
            env_index: 0,
            step_count: 5,
            cumulative_reward: 5.0,
            terminated: true,
            truncated: false,
            start_timestamp_ns: 1,
            end_timestamp_ns: 2,
            final_info: Mp::Nil,
        };
        let msgs = vec![
            Message::Hello {
                generation: "g".into(),
                peer: PeerInfo::this("x"),
                editions: vec!["2026.06".into()],
                preferred: None,
                capabilities: vec![],
                service: "env".into(),
                token: "t0k".into(),
            },
            Message::Reset {
                seeds: vec![Some(1), None],
                options: Mp::Nil,
                episode_ids: vec!["a".into()],
                env_indices: vec![],
                timeout_ms: 5,
                seed_int: false,
            },
            Message::Step {
                action: vec![Mp::Int(1)],
                episode_ids: vec![(0, "id".into())],
                timeout_ms: 0,
                has_action: false,
            },
            Message::StepReply {
                obs: vec![],
                reward: 1.5,
                terminated: false,
                truncated: true,
                info: Mp::Nil,
                completed: vec![rec.clone()],
                endpoint_ns: 9,
            },
            Message::CloseReply {
                final_episodes: vec![rec],
            },
            Message::Ping {
                token: String::new(),
            },
            Message::Ping { token: "t".into() },
            Message::Incompatible {
                message: "m".into(),
                generation: "g".into(),
                editions: vec![],
                reason: UNAUTHENTICATED.into(),
            },
            Message::Pong {
                state: "busy".into(),
                generation: "g".into(),
                service: "env".into(),
                sessions: 0,
                limit: 0,
                auth: "required".into(),
            },
            Message::Error {
                code: 10,
                message: "m".into(),
                recoverable: false,
                op: "step".into(),
            },
            Message::RenderReply {
                format: Some("raw".into()),
                shape: vec![2, 2, 3],
            },
        ];
        for m in msgs {
            assert_eq!(Message::decode(m.kind(), &m.header()).unwrap(), m);
        }
    }

    #[test]
    fn readers_accept_extra_fields_and_default_missing_ones() {
        let extra = Mp::Array(vec![
            Mp::Array(vec![Mp::Int(1)]),
            Mp::Map(vec![]),
            Mp::Int(0),
            Mp::Bool(true),
            Mp::str("future"),
        ]);
        assert!(matches!(
            Message::decode(kind::STEP, &extra.to_bytes()).unwrap(),
            Message::Step {
                has_action: true,
                ..
            }
        ));
        let short = Mp::Array(vec![Mp::Array(vec![])]);
        assert!(matches!(
            Message::decode(kind::STEP, &short.to_bytes()).unwrap(),
            Message::Step {
                has_action: true,
                timeout_ms: 0,
                ..
            }
        ));
        assert!(Message::decode(kind::STEP, &Mp::Array(vec![]).to_bytes()).is_err());
        assert!(Message::decode(kind::STEP, &Mp::Array(vec![Mp::Int(1)]).to_bytes()).is_err());
        assert!(Message::decode(0x42, &Mp::Array(vec![]).to_bytes()).is_err());
    }
}

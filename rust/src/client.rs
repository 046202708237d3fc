//! `RemoteEnv`: drive an rlmesh env endpoint (Python- or Rust-served) from Rust.

use std::time::Duration;

use crate::env::Env;
use crate::error::{Error, ErrorCode, Result};
use crate::frame::{Frame, FrameLimits};
use crate::ids;
use crate::msgpack::Mp;
use crate::space::Space;
use crate::transport::{Address, Conn, RecvError, Stream};
use crate::value::{dict_from_mp, dict_to_mp, DType, InfoDict, Metadata, Tensor, Value};
use crate::wire::{self, kind, EpisodeRecord, Message, PeerInfo};

/// A connection to one env endpoint: a Gymnasium-shaped handle on the remote env.
///
/// `reset` and `step` add the runtime keys `episode_ids` (and `completed_episodes` on
/// step) to `info`, as the Python clients do; an env's own key of the same name wins.
pub struct RemoteEnv {
    conn: Conn,
    address: Address,
    next_id: u32,
    closed: bool,
    id: String,
    render_mode: Option<String>,
    metadata: Option<Metadata>,
    autoreset_mode: String,
    obs_space: Space,
    act_space: Space,
    selected_edition: String,
    episode_id: String,
    last_completed: Vec<EpisodeRecord>,
    timeout: Option<Duration>,
}

fn reply_error(msg: Message) -> Error {
    match msg {
        Message::Error {
            code,
            message,
            recoverable,
            op,
        } => Error::with_code(ErrorCode::from_number(code), message, recoverable).with_op(&op),
        other => Error::protocol(format!(
            "unexpected reply {}",
            wire::kind_name(other.kind())
        )),
    }
}

impl RemoteEnv {
    /// Connect and handshake (`host:port`, `tcp://host:port` or `unix:///path`), sending
    /// `$RLMESH_TOKEN` when it is set.
    pub fn connect(address: &str) -> Result<RemoteEnv> {
        RemoteEnv::connect_with(address, None, None)
    }

    /// Connect with the endpoint's token (see docs/security.md).
    pub fn connect_with_token(address: &str, token: &str) -> Result<RemoteEnv> {
        RemoteEnv::connect_with(address, None, Some(token))
    }

    /// Connect with a per-request deadline (sent as `timeout_ms` and used as the socket
    /// read timeout).
    pub fn connect_with_timeout(address: &str, timeout: Option<Duration>) -> Result<RemoteEnv> {
        RemoteEnv::connect_with(address, timeout, None)
    }

    /// Connect with a per-request deadline and a token (`None`: `$RLMESH_TOKEN`, else none).
    /// A missing or wrong token is an [`ErrorKind::Authentication`](crate::ErrorKind::Authentication) error.
    pub fn connect_with(
        address: &str,
        timeout: Option<Duration>,
        token: Option<&str>,
    ) -> Result<RemoteEnv> {
        let token = match token {
            Some(t) => t.to_owned(),
            None => std::env::var("RLMESH_TOKEN").unwrap_or_default(),
        };
        let addr = Address::parse_connect(address)?;
        let stream = Stream::connect(&addr, Some(timeout.unwrap_or(Duration::from_secs(30))))?;
        let _ = stream.set_read_timeout(timeout);
        let mut conn = Conn::new(stream, FrameLimits::DEFAULT);
        let hello = Message::Hello {
            generation: wire::PROTOCOL_GENERATION.into(),
            peer: PeerInfo::this("rlmesh-client"),
            editions: vec![wire::EDITION.into()],
            preferred: Some(wire::EDITION.into()),
            capabilities: vec![],
            service: "env".into(),
            token,
        };
        conn.send(&hello, 1, &[] as &[&[u8]])?;
        let frame = recv(&mut conn)?;
        let msg = Message::decode(frame.kind, frame.header())?;
        let (selected, contract) = match msg {
            Message::Welcome {
                selected, contract, ..
            } => (selected, contract),
            Message::Busy { message } => return Err(Error::handshake(ErrorCode::Busy, message)),
            Message::Incompatible {
                message, reason, ..
            } if reason == wire::UNAUTHENTICATED => {
                return Err(Error::authentication(format!(
                    "the env server at {addr} refused this client: {message}"
                )))
            }
            Message::Incompatible { message, .. } => {
                return Err(Error::handshake(ErrorCode::Unsupported, message))
            }
            other => return Err(reply_error(other)),
        };
        let num_envs = contract.get("num_envs").and_then(Mp::as_i64).unwrap_or(1);
        if num_envs != 1 {
            return Err(Error::invalid_argument(format!(
                "RemoteEnv drives one env; the endpoint at {addr} serves {num_envs} lanes"
            )));
        }
        let space = |key: &str| -> Result<Space> {
            Space::from_spec(
                contract
                    .get(key)
                    .ok_or_else(|| Error::protocol(format!("the contract has no {key}")))?,
            )
        };
        let metadata = match contract.get("metadata") {
            None | Some(Mp::Nil) => None,
            Some(m) => Some(dict_from_mp(m)?),
        };
        Ok(RemoteEnv {
            conn,
            address: addr,
            next_id: 2,
            closed: false,
            id: contract
                .get("id")
                .and_then(Mp::as_str)
                .unwrap_or("UnknownEnv-v1")
                .to_owned(),
            render_mode: contract
                .get("render_mode")
                .and_then(Mp::as_str)
                .map(str::to_owned),
            metadata,
            autoreset_mode: contract
                .get("autoreset_mode")
                .and_then(Mp::as_str)
                .unwrap_or("Disabled")
                .to_owned(),
            obs_space: space("observation_space")?,
            act_space: space("action_space")?,
            selected_edition: selected,
            episode_id: String::new(),
            last_completed: vec![],
            timeout,
        })
    }

    /// The endpoint's address.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The env id from the contract.
    pub fn env_id(&self) -> &str {
        &self.id
    }

    /// The served autoreset mode (`"NextStep"` or `"Disabled"`).
    pub fn autoreset_mode(&self) -> &str {
        &self.autoreset_mode
    }

    /// The workflow edition the handshake selected.
    pub fn selected_workflow_edition(&self) -> &str {
        &self.selected_edition
    }

    /// Episodes the last step (or close) reported complete.
    pub fn completed_episodes(&self) -> &[EpisodeRecord] {
        &self.last_completed
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn timeout_ms(&self) -> i64 {
        self.timeout.map(|t| t.as_millis() as i64).unwrap_or(0)
    }

    fn request<S: AsRef<[u8]>>(
        &mut self,
        msg: &Message,
        segments: &[S],
        expect: u8,
    ) -> Result<(Message, Frame)> {
        if self.closed {
            return Err(Error::connection("the remote env is closed"));
        }
        let rid = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        if let Err(e) = self.conn.send(msg, rid, segments) {
            self.closed = true;
            return Err(e.into());
        }
        let frame = match recv(&mut self.conn) {
            Ok(f) => f,
            Err(e) => {
                self.closed = true;
                return Err(e);
            }
        };
        if frame.request_id != rid {
            self.closed = true;
            return Err(Error::protocol(format!(
                "reply to request {} answered request {rid}",
                frame.request_id
            )));
        }
        let reply =
            Message::decode(frame.kind, frame.header()).inspect_err(|_| self.closed = true)?;
        if frame.kind == kind::ERROR {
            let err = reply_error(reply);
            if !err.is_recoverable() {
                self.closed = true;
                self.conn.stream.shutdown();
            }
            return Err(err);
        }
        if frame.kind != expect {
            self.closed = true;
            return Err(Error::protocol(format!(
                "peer answered with {}",
                wire::kind_name(frame.kind)
            )));
        }
        Ok((reply, frame))
    }

    fn inject(info: &mut InfoDict, key: &str, value: Value) {
        if !info.contains_key(key) {
            info.insert(key, value);
        }
    }

    /// Start an episode (a fresh UUIDv7 episode id is sent along, AR-3).
    pub fn reset(
        &mut self,
        seed: Option<i64>,
        options: Option<&InfoDict>,
    ) -> Result<(Value, InfoDict)> {
        let eid = ids::uuid7();
        let req = Message::Reset {
            seeds: vec![seed],
            options: options.map(dict_to_mp).unwrap_or(Mp::Nil),
            episode_ids: vec![eid.clone()],
            env_indices: vec![],
            timeout_ms: self.timeout_ms(),
            seed_int: false,
        };
        let (reply, frame) = self.request(&req, &[] as &[&[u8]], kind::RESET_REPLY)?;
        let Message::ResetReply { obs, info, .. } = reply else {
            unreachable!()
        };
        let obs = self
            .obs_space
            .join(&obs, &frame.segments())
            .map_err(|e| Error::protocol(format!("observation: {e}")))?;
        let mut info = dict_from_mp(&info)?;
        self.episode_id = eid;
        Self::inject(
            &mut info,
            "episode_ids",
            Value::List(vec![Value::Text(self.episode_id.clone())]),
        );
        Ok((obs, info))
    }

    /// Apply one action (`None` sends none: the env's `step` receives `None`).
    pub fn step(&mut self, action: Option<&Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        let (scalars, segments) = match action {
            Some(a) => self.act_space.split(a).map_err(|e| {
                Error::invalid_action(format!("action does not match action_space at {e}"))
            })?,
            None => (vec![], vec![]),
        };
        let req = Message::Step {
            action: scalars,
            episode_ids: vec![],
            timeout_ms: self.timeout_ms(),
            has_action: action.is_some(),
        };
        let (reply, frame) = self.request(&req, &segments, kind::STEP_REPLY)?;
        let Message::StepReply {
            obs,
            reward,
            terminated,
            truncated,
            info,
            completed,
            ..
        } = reply
        else {
            unreachable!()
        };
        let obs = self
            .obs_space
            .join(&obs, &frame.segments())
            .map_err(|e| Error::protocol(format!("observation: {e}")))?;
        let mut info = dict_from_mp(&info)?;
        self.last_completed = completed;
        Self::inject(
            &mut info,
            "episode_ids",
            Value::List(vec![Value::Text(self.episode_id.clone())]),
        );
        Self::inject(
            &mut info,
            "completed_episodes",
            Value::Int((terminated || truncated) as i64),
        );
        Ok((obs, reward, terminated, truncated, info))
    }

    /// The current frame as a uint8 tensor (`[H, W]`, `[H, W, 3]` or `[H, W, 4]`), or
    /// `None` when the env renders none.
    pub fn render(&mut self) -> Result<Option<Tensor>> {
        let req = Message::Render {
            env_index: 0,
            timeout_ms: self.timeout_ms(),
        };
        let (reply, frame) = self.request(&req, &[] as &[&[u8]], kind::RENDER_REPLY)?;
        let Message::RenderReply { format, shape } = reply else {
            unreachable!()
        };
        if format.as_deref() != Some("raw") {
            return Ok(None); // RND-4: an unknown format is no frame
        }
        let segs = frame.segments();
        let shape: Vec<usize> = shape.iter().map(|d| (*d).max(0) as usize).collect();
        let data = segs
            .first()
            .ok_or_else(|| Error::protocol("render reply without its frame segment"))?
            .to_vec();
        Tensor::new(DType::U8, shape, data)
            .map(Some)
            .map_err(|e| Error::protocol(e.message().to_owned()))
    }

    /// End the session (the env keeps running for the next client). Idempotent.
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let req = Message::Close {
            reason: String::new(),
        };
        let out = self.request(&req, &[] as &[&[u8]], kind::CLOSE_REPLY);
        self.closed = true;
        self.conn.stream.shutdown();
        let (reply, _) = out?;
        if let Message::CloseReply { final_episodes } = reply {
            self.last_completed = final_episodes;
        }
        Ok(())
    }

    /// Ping an endpoint without a session: `"ready"` or `"busy"`.
    pub fn ping(address: &str) -> Result<String> {
        let addr = Address::parse_connect(address)?;
        let stream = Stream::connect(&addr, Some(Duration::from_secs(5)))?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut conn = Conn::new(stream, FrameLimits::DEFAULT);
        conn.send(
            &Message::Ping {
                token: String::new(),
            },
            1,
            &[] as &[&[u8]],
        )?;
        let frame = recv(&mut conn)?;
        match Message::decode(frame.kind, frame.header())? {
            Message::Pong { state, .. } => Ok(state),
            other => Err(reply_error(other)),
        }
    }

    /// Ask the endpoint's owner to stop serving; `Ok(true)` when accepted.
    pub fn shutdown(address: &str, reason: &str) -> Result<bool> {
        let addr = Address::parse_connect(address)?;
        let stream = Stream::connect(&addr, Some(Duration::from_secs(5)))?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut conn = Conn::new(stream, FrameLimits::DEFAULT);
        conn.send(
            &Message::Shutdown {
                reason: reason.into(),
                token: std::env::var("RLMESH_TOKEN").unwrap_or_default(),
            },
            1,
            &[] as &[&[u8]],
        )?;
        let frame = recv(&mut conn)?;
        match Message::decode(frame.kind, frame.header())? {
            Message::ShutdownReply { accepted, .. } => Ok(accepted),
            other => Err(reply_error(other)),
        }
    }
}

fn recv(conn: &mut Conn) -> Result<Frame> {
    conn.recv().map_err(|e| match e {
        RecvError::Closed => Error::connection("the server closed the connection"),
        RecvError::Io(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Error::with_code(
                ErrorCode::Timeout,
                "remote environment call timed out",
                false,
            )
        }
        RecvError::Io(e) => Error::connection(e.to_string()),
        RecvError::Protocol(e) => e,
    })
}

impl Drop for RemoteEnv {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A `RemoteEnv` is itself an [`Env`]: a Rust server can front a remote env.
impl Env for RemoteEnv {
    fn observation_space(&self) -> Space {
        self.obs_space.clone()
    }
    fn action_space(&self) -> Space {
        self.act_space.clone()
    }
    fn reset(
        &mut self,
        seed: Option<i64>,
        options: Option<&InfoDict>,
    ) -> Result<(Value, InfoDict)> {
        RemoteEnv::reset(self, seed, options)
    }
    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        RemoteEnv::step(self, action.as_ref())
    }
    fn render(&mut self) -> Result<Option<Value>> {
        Ok(RemoteEnv::render(self)?.map(Value::Tensor))
    }
    fn close(&mut self) -> Result<()> {
        RemoteEnv::close(self)
    }
    fn render_mode(&self) -> Option<String> {
        self.render_mode.clone()
    }
    fn metadata(&self) -> Option<Metadata> {
        self.metadata.clone()
    }
    fn id(&self) -> Option<String> {
        Some(self.id.clone())
    }
}

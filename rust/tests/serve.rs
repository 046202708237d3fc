//! A Rust server and the Rust client over real sockets: sessions, errors (RENV-6),
//! episode books (AR-4..AR-9), render (RENV-4), handshake and limits.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use rlmesh::frame::{self, FrameLimits, PREFIX_SIZE};
use rlmesh::msgpack::Mp;
use rlmesh::wire::{kind, Message, PeerInfo};
use rlmesh::{
    DType, Env, EnvServer, Error, ErrorCode, InfoDict, RemoteEnv, Result, ServeOptions,
    ServerHandle, Space, Value,
};

/// Action 0: normal (terminates after `limit` steps), 1 recoverable error, 2 fatal,
/// 3 panic, 4 wrong observation, 5 truncates, 6 sleeps 60 ms.
struct TestEnv {
    steps: i64,
    limit: i64,
    next_step: bool,
    autoreset_pending: bool,
}

impl TestEnv {
    fn new(next_step: bool) -> TestEnv {
        TestEnv {
            steps: 0,
            limit: 3,
            next_step,
            autoreset_pending: false,
        }
    }
}

impl Env for TestEnv {
    fn observation_space(&self) -> Space {
        Space::dict([
            (
                "pos",
                Space::box_uniform(&[2], DType::F32, -10.0, 10.0).unwrap(),
            ),
            ("count", Space::discrete(1000)),
        ])
    }
    fn action_space(&self) -> Space {
        Space::discrete(7)
    }
    fn reset(
        &mut self,
        seed: Option<i64>,
        options: Option<&InfoDict>,
    ) -> Result<(Value, InfoDict)> {
        if options.and_then(|o| o.get("fail")).is_some() {
            return Err(Error::environment_recoverable("reset refused"));
        }
        self.steps = 0;
        self.autoreset_pending = false;
        Ok((
            self.obs(),
            InfoDict::new().with("seed", seed.map(Value::Int).unwrap_or(Value::None)),
        ))
    }
    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        if self.autoreset_pending {
            self.autoreset_pending = false;
            self.steps = 0;
            return Ok((self.obs(), 0.0, false, false, InfoDict::new()));
        }
        match action.as_ref().and_then(Value::as_i64) {
            Some(1) => return Err(Error::environment_recoverable("try again")),
            Some(2) => return Err(Error::environment("boom")),
            Some(3) => panic!("kaboom"),
            Some(4) => return Ok((Value::Int(3), 0.0, false, false, InfoDict::new())),
            Some(6) => thread::sleep(Duration::from_millis(60)),
            _ => {}
        }
        self.steps += 1;
        let terminated = self.steps >= self.limit;
        let truncated = action.as_ref().and_then(Value::as_i64) == Some(5);
        if self.next_step && (terminated || truncated) {
            self.autoreset_pending = true;
        }
        Ok((
            self.obs(),
            1.0,
            terminated,
            truncated,
            InfoDict::new().with("action_given", action.is_some()),
        ))
    }
    fn render(&mut self) -> Result<Option<Value>> {
        Ok(Some(Value::tensor(
            &[4, 1, 2],
            &[1u16, 2, 3, 4, 5, 6, 7, 258],
        )))
    }
    fn metadata(&self) -> Option<InfoDict> {
        self.next_step
            .then(|| InfoDict::new().with("autoreset_mode", "NextStep"))
    }
}

impl TestEnv {
    fn obs(&self) -> Value {
        Value::Dict(
            InfoDict::new()
                .with("count", self.steps)
                .with("pos", Value::tensor(&[2], &[self.steps as f32, -1.0f32])),
        )
    }
}

fn start<E: Env + Send + 'static>(
    env: E,
    address: &str,
) -> (String, ServerHandle, thread::JoinHandle<Result<()>>) {
    let bound = EnvServer::new(env)
        .unwrap()
        .allow_remote_shutdown(true)
        .bind(address)
        .unwrap();
    let addr = bound.local_addr().to_string();
    let handle = bound.handle();
    (addr, handle, thread::spawn(move || bound.serve()))
}

fn stop(handle: ServerHandle, join: thread::JoinHandle<Result<()>>) {
    handle.stop();
    join.join().unwrap().unwrap();
}

#[test]
fn an_episode_runs_and_its_books_are_kept() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    assert!(addr.starts_with("tcp://127.0.0.1:") && !addr.ends_with(":0"));
    let mut env = RemoteEnv::connect(&addr).unwrap();
    assert_eq!(env.env_id(), "UnknownEnv-v1"); // RENV-2: id() None
    assert_eq!(env.selected_workflow_edition(), "2026.06");
    let (obs, info) = env.reset(Some(42), None).unwrap();
    assert_eq!(obs.as_dict().unwrap()["count"], Value::Int(0));
    assert_eq!(info["seed"], Value::Int(42));
    let ids = info["episode_ids"].clone();
    for i in 1..=3 {
        let (obs, reward, terminated, _, info) = env.step(Some(&Value::Int(0))).unwrap();
        assert_eq!(
            obs.as_dict().unwrap()["pos"],
            Value::tensor(&[2], &[i as f32, -1.0])
        );
        assert_eq!(reward, 1.0);
        assert_eq!(terminated, i == 3);
        assert_eq!(info["episode_ids"], ids);
        assert_eq!(info["completed_episodes"], Value::Int((i == 3) as i64));
    }
    let done = env.completed_episodes();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (
            done[0].step_count,
            done[0].cumulative_reward,
            done[0].seed,
            done[0].terminated
        ),
        (3, 3.0, Some(42), true)
    );
    assert_eq!(
        Value::List(vec![Value::Text(done[0].episode_id.clone())]),
        ids
    );
    // AR-4: resetting over an active episode completes it as truncated (delivered with the next step)
    env.reset(None, None).unwrap();
    env.step(Some(&Value::Int(0))).unwrap();
    env.reset(None, None).unwrap();
    env.step(Some(&Value::Int(0))).unwrap();
    let done = env.completed_episodes();
    assert_eq!(done.len(), 1);
    assert!(done[0].truncated && !done[0].terminated && done[0].seed.is_none());
    env.close().unwrap();
    let finals = env.completed_episodes();
    assert_eq!(
        finals.len(),
        1,
        "close reports the active episode as truncated (SES-5)"
    );
    stop(handle, join);
}

#[test]
fn recoverable_errors_keep_the_session_and_fatal_ones_end_it() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut env = RemoteEnv::connect(&addr).unwrap();
    env.reset(None, None).unwrap();
    let e = env.step(Some(&Value::Int(1))).unwrap_err();
    assert!(e.is_recoverable());
    assert_eq!(e.to_string(), "[INTERNAL] step failed: try again");
    env.step(Some(&Value::Int(0))).unwrap(); // the session survived
    let e = env
        .reset(None, Some(&InfoDict::new().with("fail", true)))
        .unwrap_err();
    assert!(e.is_recoverable() && e.to_string().contains("reset failed: reset refused"));
    let e = env.step(Some(&Value::Int(2))).unwrap_err();
    assert!(!e.is_recoverable());
    assert_eq!(e.to_string(), "[INTERNAL] step failed: boom"); // RENV-6
    assert!(env.is_closed());
    assert!(env.step(Some(&Value::Int(0))).is_err());
    // the endpoint is free again for a new session
    let mut env = RemoteEnv::connect(&addr).unwrap();
    env.reset(None, None).unwrap();
    let e = env.step(Some(&Value::Int(3))).unwrap_err();
    assert!(
        !e.is_recoverable()
            && e.to_string()
                .starts_with("[INTERNAL] step task panicked: kaboom"),
        "{e}"
    );
    let mut env = RemoteEnv::connect(&addr).unwrap();
    env.reset(None, None).unwrap();
    let e = env.step(Some(&Value::Int(4))).unwrap_err();
    assert!(!e.is_recoverable());
    assert!(e.to_string().contains("step failed: the env returned an observation that does not match observation_space at $"), "{e}");
    stop(handle, join);
}

#[test]
fn invalid_actions_are_refused_before_the_env_sees_them() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut env = RemoteEnv::connect(&addr).unwrap();
    env.reset(None, None).unwrap();
    // the client validates first
    assert_eq!(
        env.step(Some(&Value::Int(9))).unwrap_err().code(),
        ErrorCode::InvalidAction
    );
    env.close().unwrap();
    thread::sleep(Duration::from_millis(20));
    // a raw request with an out-of-range action gets a recoverable INVALID_ACTION from the server
    let mut raw = RawClient::hello(&addr);
    let reply = raw.request(
        &Message::Reset {
            seeds: vec![],
            options: Mp::Nil,
            episode_ids: vec![],
            env_indices: vec![],
            timeout_ms: 0,
            seed_int: false,
        },
        2,
    );
    assert_eq!(reply.0, kind::RESET_REPLY);
    let (k, msg) = raw.request(
        &Message::Step {
            action: vec![Mp::Int(7)],
            episode_ids: vec![],
            timeout_ms: 0,
            has_action: true,
        },
        3,
    );
    assert_eq!(k, kind::ERROR);
    let Message::Error {
        code,
        recoverable,
        message,
        ..
    } = msg
    else {
        panic!()
    };
    assert_eq!((code, recoverable), (2, true));
    assert!(
        message.starts_with("action does not match action_space at $: Discrete value 7"),
        "{message}"
    );
    // a step without an action reaches the env as None (RENV-1)
    let (k, msg) = raw.request(
        &Message::Step {
            action: vec![],
            episode_ids: vec![],
            timeout_ms: 0,
            has_action: false,
        },
        4,
    );
    assert_eq!(k, kind::STEP_REPLY);
    let Message::StepReply { info, .. } = msg else {
        panic!()
    };
    assert_eq!(info.get("action_given"), Some(&Mp::Bool(false)));
    stop(handle, join);
}

#[test]
fn one_session_at_a_time_and_ping_from_anyone() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    assert_eq!(RemoteEnv::ping(&addr).unwrap(), "ready");
    let mut first = RemoteEnv::connect(&addr).unwrap();
    assert_eq!(RemoteEnv::ping(&addr).unwrap(), "busy");
    let err = RemoteEnv::connect(&addr).err().unwrap();
    assert_eq!(err.code(), ErrorCode::Busy);
    first.close().unwrap();
    thread::sleep(Duration::from_millis(20));
    let _second = RemoteEnv::connect(&addr).unwrap();
    stop(handle, join);
}

#[test]
fn render_casts_to_uint8_and_transposes_chw() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut env = RemoteEnv::connect(&addr).unwrap();
    let frame = env.render().unwrap().unwrap();
    assert_eq!(frame.shape(), &[1, 2, 4]);
    assert_eq!(frame.data(), &[1, 3, 5, 7, 2, 4, 6, 2]); // 258 cast to 2
    drop(env);
    stop(handle, join);
}

#[test]
fn next_step_autoreset_books_and_contract() {
    let (addr, handle, join) = start(TestEnv::new(true), "127.0.0.1:0");
    let mut env = RemoteEnv::connect(&addr).unwrap();
    assert_eq!(env.autoreset_mode(), "NextStep");
    env.reset(Some(1), None).unwrap();
    for _ in 0..3 {
        env.step(Some(&Value::Int(0))).unwrap();
    }
    assert_eq!(env.completed_episodes().len(), 1);
    let first_id = env.completed_episodes()[0].episode_id.clone();
    // the autoreset step: a fresh episode starts, nothing completes
    let (obs, reward, terminated, _, _) = env.step(Some(&Value::Int(0))).unwrap();
    assert_eq!(
        (obs.as_dict().unwrap()["count"].clone(), reward, terminated),
        (Value::Int(0), 0.0, false)
    );
    assert!(env.completed_episodes().is_empty());
    for _ in 0..3 {
        env.step(Some(&Value::Int(0))).unwrap();
    }
    let rec = &env.completed_episodes()[0];
    assert_eq!(
        (rec.step_count, rec.cumulative_reward, rec.seed),
        (3, 3.0, None)
    );
    assert_ne!(
        rec.episode_id, first_id,
        "the autoreset episode has an id of its own"
    );
    drop(env);
    stop(handle, join);
}

#[test]
fn same_step_autoreset_is_refused_at_construction() {
    struct SameStep;
    impl Env for SameStep {
        fn observation_space(&self) -> Space {
            Space::discrete(2)
        }
        fn action_space(&self) -> Space {
            Space::discrete(2)
        }
        fn reset(&mut self, _: Option<i64>, _: Option<&InfoDict>) -> Result<(Value, InfoDict)> {
            Ok((Value::Int(0), InfoDict::new()))
        }
        fn step(&mut self, _: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
            Ok((Value::Int(0), 0.0, false, false, InfoDict::new()))
        }
        fn metadata(&self) -> Option<InfoDict> {
            Some(InfoDict::new().with("autoreset_mode", "SameStep"))
        }
    }
    let err = EnvServer::new(SameStep).err().unwrap();
    assert!(err
        .to_string()
        .contains("SAME_STEP autoreset mode is not yet supported"));
}

#[cfg(unix)]
#[test]
fn unix_sockets_serve_too_and_remote_shutdown_stops_the_server() {
    let dir = std::env::temp_dir().join(format!("rlm-rs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("env.sock");
    let (addr, _handle, join) = start(TestEnv::new(false), &format!("unix://{}", path.display()));
    assert_eq!(addr, format!("unix://{}", path.display()));
    let mut env = RemoteEnv::connect(&addr).unwrap();
    env.reset(None, None).unwrap();
    env.step(Some(&Value::Int(0))).unwrap();
    assert!(RemoteEnv::shutdown(&addr, "test over").unwrap());
    join.join().unwrap().unwrap();
    assert!(!path.exists(), "the socket file is removed on exit");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_token_is_checked_at_the_handshake_before_the_env_sees_anything() {
    let env = TestEnv::new(false);
    let bound = EnvServer::new(env)
        .unwrap()
        .token("s3cret")
        .allow_remote_shutdown(true)
        .bind("127.0.0.1:0")
        .unwrap();
    let addr = bound.local_addr().to_string();
    let handle = bound.handle();
    let join = thread::spawn(move || bound.serve());
    for token in [None, Some("wrong")] {
        let err = RemoteEnv::connect_with(&addr, None, Some(token.unwrap_or("")))
            .err()
            .expect("refused");
        assert_eq!(err.kind(), &rlmesh::ErrorKind::Authentication, "{err}");
        assert!(err.to_string().contains("authentication failed"), "{err}");
        assert!(
            !err.to_string().contains("s3cret"),
            "the message never holds the token"
        );
    }
    // a stranger's Shutdown without the token is refused; a probe still learns the state
    let mut raw = RawClient::connect(&addr);
    let (k, msg) = raw.request(
        &Message::Shutdown {
            reason: "x".into(),
            token: String::new(),
        },
        1,
    );
    assert_eq!(k, kind::SHUTDOWN_REPLY);
    assert!(matches!(
        msg,
        Message::ShutdownReply {
            accepted: false,
            ..
        }
    ));
    assert_eq!(RemoteEnv::ping(&addr).unwrap(), "ready");
    // a probe's token: none -> "required"; the right one -> "ok"; a wrong one is a failure
    // like a wrong Hello (counted, answered with no state), as on a Python endpoint
    let probe = |token: &str| {
        let mut raw = RawClient::connect(&addr);
        let (k, msg) = raw.request(
            &Message::Ping {
                token: token.into(),
            },
            1,
        );
        assert_eq!(k, kind::PONG);
        match msg {
            Message::Pong { state, auth, .. } => (state, auth),
            other => panic!("a Pong, not {other:?}"),
        }
    };
    assert_eq!(probe(""), ("ready".to_owned(), "required".to_owned()));
    assert_eq!(probe("s3cret"), ("ready".to_owned(), "ok".to_owned()));
    assert_eq!(probe("guess"), (String::new(), "refused".to_owned()));
    assert_eq!(handle.stats().requests, 0, "the env saw no request");
    assert_eq!(handle.stats().auth_failures, 4);
    let mut env = RemoteEnv::connect_with_token(&addr, "s3cret").unwrap();
    env.reset(Some(1), None).unwrap();
    env.step(Some(&Value::Int(0))).unwrap();
    env.close().unwrap();
    stop(handle, join);
}

#[test]
fn binding_beyond_loopback_needs_a_token_or_the_opt_out() {
    let err = EnvServer::new(TestEnv::new(false))
        .unwrap()
        .with_options(ServeOptions {
            token: None,
            ..ServeOptions::default()
        })
        .bind("0.0.0.0:0")
        .err()
        .expect("refused before binding");
    assert!(err.to_string().contains("--token-file"), "{err}");
    assert!(err.to_string().contains("insecure_no_auth"), "{err}");
    // loopback and unix sockets need no token
    let bound = EnvServer::new(TestEnv::new(false))
        .unwrap()
        .with_options(ServeOptions {
            token: None,
            ..ServeOptions::default()
        })
        .bind("127.0.0.1:0")
        .unwrap();
    drop(bound);
}

#[test]
fn throttle_delays_grow_and_stay_bounded() {
    use rlmesh::server::throttle_delay;
    let secs: Vec<u64> = (1..=10).map(|n| throttle_delay(n).as_secs()).collect();
    assert_eq!(secs, vec![0, 0, 0, 1, 2, 4, 8, 16, 16, 16]);
}

#[test]
fn handshake_refuses_other_generations_and_services() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    for (generation, service, editions) in [
        ("rlmesh-wire-v1", "env", "2026.06"),
        ("rlmesh-py-v1", "model", "2026.06"),
        ("rlmesh-py-v1", "env", "2030.01"),
    ] {
        let mut raw = RawClient::connect(&addr);
        let hello = Message::Hello {
            generation: generation.into(),
            peer: PeerInfo::default(),
            editions: vec![editions.into()],
            preferred: None,
            capabilities: vec![],
            service: service.into(),
            token: String::new(),
        };
        let (k, _) = raw.request(&hello, 1);
        assert_eq!(k, kind::INCOMPATIBLE, "{generation} {service} {editions}");
    }
    // a request before Hello is a protocol error that closes that connection only
    let mut raw = RawClient::connect(&addr);
    let (k, msg) = raw.request(
        &Message::Step {
            action: vec![],
            episode_ids: vec![],
            timeout_ms: 0,
            has_action: false,
        },
        5,
    );
    assert_eq!(k, kind::ERROR);
    let Message::Error { code, message, .. } = msg else {
        panic!()
    };
    assert_eq!(code, 14);
    assert_eq!(message, "Step is not allowed in session state AWAIT_HELLO");
    assert_eq!(RemoteEnv::ping(&addr).unwrap(), "ready");
    // Attach is declined: rings are optional and the session stays on the socket
    let mut raw = RawClient::hello(&addr);
    let (k, msg) = raw.request(
        &Message::Attach {
            path: "/dev/shm/rlmesh-x".into(),
        },
        2,
    );
    assert_eq!(
        (k, msg),
        (kind::ATTACH_REPLY, Message::AttachReply { attached: false })
    );
    let (k, _) = raw.request(
        &Message::Ping {
            token: String::new(),
        },
        3,
    );
    assert_eq!(k, kind::PONG);
    drop(raw);
    stop(handle, join);
}

#[test]
fn oversized_prefixes_are_refused_before_allocation() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut raw = RawClient::connect(&addr);
    let mut prefix = Vec::new();
    frame::encode_frame(&mut prefix, kind::HELLO, 1, &[0x90], &[] as &[&[u8]]);
    prefix.truncate(PREFIX_SIZE);
    prefix[16..24].copy_from_slice(&(2u64 << 20).to_le_bytes()); // 2 MiB before Welcome
    raw.stream.write_all(&prefix).unwrap();
    let (k, msg) = raw.recv();
    assert_eq!(k, kind::ERROR);
    let Message::Error { message, .. } = msg else {
        panic!()
    };
    assert!(message.contains("exceeds the limit"), "{message}");
    stop(handle, join);
}

struct RawClient {
    stream: TcpStream,
}

impl RawClient {
    fn connect(addr: &str) -> RawClient {
        let stream = TcpStream::connect(addr.trim_start_matches("tcp://")).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        RawClient { stream }
    }

    fn hello(addr: &str) -> RawClient {
        let mut raw = RawClient::connect(addr);
        let hello = Message::Hello {
            generation: "rlmesh-py-v1".into(),
            peer: PeerInfo::default(),
            editions: vec!["2026.06".into()],
            preferred: None,
            capabilities: vec![],
            service: "env".into(),
            token: String::new(),
        };
        assert_eq!(raw.request(&hello, 1).0, kind::WELCOME);
        raw
    }

    fn request(&mut self, msg: &Message, rid: u32) -> (u8, Message) {
        let mut out = Vec::new();
        frame::encode_frame(&mut out, msg.kind(), rid, &msg.header(), &[] as &[&[u8]]);
        self.stream.write_all(&out).unwrap();
        self.recv()
    }

    fn recv(&mut self) -> (u8, Message) {
        let mut prefix = [0u8; PREFIX_SIZE];
        self.stream.read_exact(&mut prefix).unwrap();
        let plan = frame::decode_prefix(&prefix, &FrameLimits::DEFAULT).unwrap();
        let mut body = vec![0u8; plan.body_len as usize];
        self.stream.read_exact(&mut body).unwrap();
        let f = frame::split_body(&plan, body).unwrap();
        (f.kind, Message::decode(f.kind, f.header()).unwrap())
    }
}

#[test]
fn configure_pins_a_supported_edition_and_refuses_others_fatally() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut raw = RawClient::hello(&addr);
    assert_eq!(
        raw.request(&Message::Configure { edition: "".into() }, 2).1,
        Message::ConfigureReply { edition: "".into() }
    );
    assert_eq!(
        raw.request(
            &Message::Configure {
                edition: " 2026.06 ".into()
            },
            3
        )
        .1,
        Message::ConfigureReply {
            edition: "2026.06".into()
        }
    );
    let (k, msg) = raw.request(
        &Message::Configure {
            edition: "2031.01".into(),
        },
        4,
    );
    assert_eq!(k, kind::ERROR);
    let Message::Error {
        code,
        recoverable,
        message,
        op,
    } = msg
    else {
        panic!()
    };
    assert_eq!((code, recoverable, op.as_str()), (2, false, "configure"));
    assert!(message.starts_with("runtime cannot drive workflow edition \"2031.01\""));
    drop(raw);
    stop(handle, join);
}

#[test]
fn out_of_range_observations_warn_once_per_path_per_session() {
    let (addr, handle, join) = start(
        TestEnv {
            limit: 100,
            ..TestEnv::new(false)
        },
        "127.0.0.1:0",
    );
    for _session in 0..2 {
        let mut env = RemoteEnv::connect(&addr).unwrap();
        env.reset(None, None).unwrap();
        let mut warnings = vec![];
        for _ in 0..13 {
            let (_, _, _, _, info) = env.step(Some(&Value::Int(0))).unwrap();
            if let Some(w) = info.get("rlmesh.conformance.warning") {
                warnings.push(w.clone());
            }
        }
        // pos[0] = 11 on the 11th step leaves Box(-10, 10): one warning for the path, then silence
        let expected = Value::List(vec![Value::Dict(
            InfoDict::new()
                .with("kind", "observation")
                .with("path", "$.pos")
                .with(
                    "detail",
                    "Box value at element 0 out of bounds: above high bound",
                ),
        )]);
        assert_eq!(warnings, vec![expected]);
        env.close().unwrap();
        thread::sleep(Duration::from_millis(20));
    }
    stop(handle, join);
}

#[test]
fn a_call_that_outlasts_its_deadline_is_a_recoverable_timeout() {
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut raw = RawClient::hello(&addr);
    raw.request(
        &Message::Reset {
            seeds: vec![],
            options: Mp::Nil,
            episode_ids: vec![],
            env_indices: vec![],
            timeout_ms: 0,
            seed_int: false,
        },
        2,
    );
    let (k, msg) = raw.request(
        &Message::Step {
            action: vec![Mp::Int(6)],
            episode_ids: vec![],
            timeout_ms: 10,
            has_action: true,
        },
        3,
    );
    assert_eq!(k, kind::ERROR);
    assert_eq!(
        msg,
        Message::Error {
            code: 1,
            message: "env.step timed out after 10ms".into(),
            recoverable: true,
            op: "step".into()
        }
    );
    let (k, _) = raw.request(
        &Message::Step {
            action: vec![Mp::Int(0)],
            episode_ids: vec![],
            timeout_ms: 1000,
            has_action: true,
        },
        4,
    );
    assert_eq!(k, kind::STEP_REPLY, "the session survives a timeout");
    drop(raw);
    stop(handle, join);
}

#[test]
fn silent_connections_cannot_lock_out_a_hello_or_a_ping() {
    // Issue 28 item 18: strangers holding more sockets than the pending limit (64) must
    // not refuse a legitimate client; the oldest silent connection is dropped instead.
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let strangers: Vec<RawClient> = (0..80).map(|_| RawClient::connect(&addr)).collect();
    assert_eq!(RemoteEnv::ping(&addr).unwrap(), "ready");
    let mut env = RemoteEnv::connect(&addr).unwrap();
    env.reset(Some(1), None).unwrap();
    env.step(Some(&Value::Int(0))).unwrap();
    // the oldest strangers were dropped: their sockets read EOF
    let mut first = strangers.into_iter().next().unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(first.stream.read(&mut buf).unwrap_or(0), 0);
    env.close().unwrap();
    stop(handle, join);
}

#[test]
fn reset_options_nested_at_the_metadata_limit_keep_the_session() {
    // Issue 28 item 19: metadata may nest 64 levels and a header 128 (docs/serving.md);
    // reset options at that limit are a valid request, not a protocol error.
    let (addr, handle, join) = start(TestEnv::new(false), "127.0.0.1:0");
    let mut env = RemoteEnv::connect(&addr).unwrap();
    let mut options = InfoDict::new().with("leaf", 1i64);
    for _ in 0..63 {
        options = InfoDict::new().with("k", Value::Dict(options));
    }
    let (_, info) = env.reset(Some(3), Some(&options)).unwrap();
    assert_eq!(info.get("seed").and_then(Value::as_i64), Some(3));
    env.step(Some(&Value::Int(0))).unwrap();
    env.close().unwrap();
    stop(handle, join);
}

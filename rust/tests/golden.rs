//! The shared golden vectors (`tests/vectors/frames.txt`, written by the Python
//! reference): every frame must encode to exactly those bytes and decode back to the
//! same message, so the Rust and Python implementations cannot drift (issue 17).

use std::collections::BTreeMap;

use rlmesh::frame::{self, FrameLimits, PREFIX_SIZE};
use rlmesh::msgpack::{self, Mp};
use rlmesh::value::{dict_to_mp, to_mp};
use rlmesh::wire::{EpisodeRecord, Message, PeerInfo};
use rlmesh::{DType, InfoDict, Space, Value};

const EPISODE_ID: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

fn load() -> BTreeMap<String, (u32, Vec<u8>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/frames.txt");
    let text = std::fs::read_to_string(path).expect("tests/vectors/frames.txt is readable");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "bad vector line {line:?}");
        let bytes = (0..parts[2].len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&parts[2][i..i + 2], 16).unwrap())
            .collect();
        out.insert(parts[0].to_owned(), (parts[1].parse().unwrap(), bytes));
    }
    out
}

fn peer() -> PeerInfo {
    PeerInfo {
        component: "rlmesh-env".into(),
        package_version: "0.1.0".into(),
        language: "python".into(),
        language_version: "3.11.7".into(),
        os: "linux".into(),
        os_version: "6.1".into(),
        arch: "x86_64".into(),
        framework_versions: vec![],
        extra: vec![],
    }
}

fn record() -> EpisodeRecord {
    EpisodeRecord {
        episode_id: EPISODE_ID.into(),
        seed: Some(7),
        env_index: 0,
        step_count: 12,
        cumulative_reward: 11.5,
        terminated: true,
        truncated: false,
        start_timestamp_ns: 1_700_000_000_000_000_000,
        end_timestamp_ns: 1_700_000_000_250_000_000,
        final_info: dict_to_mp(&InfoDict::new().with("reason", "fell")),
    }
}

fn obs() -> Vec<u8> {
    [0.5f32, -0.25, 0.125, 1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn contract() -> Mp {
    let inf = f64::INFINITY;
    let obs = Space::box_elementwise(
        &[4],
        DType::F32,
        &[-4.8, -inf, -0.5, -inf],
        &[4.8, inf, 0.5, inf],
    )
    .unwrap();
    Mp::Map(vec![
        (Mp::str("id"), Mp::str("CartPole-v1")),
        (Mp::str("render_mode"), Mp::Nil),
        (Mp::str("num_envs"), Mp::Int(1)),
        (Mp::str("metadata"), Mp::Nil),
        (Mp::str("observation_space"), obs.to_spec()),
        (Mp::str("action_space"), Space::discrete(2).to_spec()),
        (Mp::str("autoreset_mode"), Mp::str("Disabled")),
    ])
}

fn dict_space_contract() -> Mp {
    let space = Space::dict([
        ("image", Space::box_int(&[2, 2], DType::U8, 0, 255).unwrap()),
        ("mode", Space::discrete(3)),
        (
            "text",
            Space::Text {
                min_length: 0,
                max_length: 8,
                charset: "ab".into(),
            },
        ),
        (
            "pair",
            Space::tuple([
                Space::multi_binary(&[3]),
                Space::MultiDiscrete {
                    shape: vec![2, 2],
                    nvec: vec![2, 3, 4, 5],
                    start: vec![0; 4],
                    dtype: DType::I64,
                },
            ]),
        ),
        (
            "big",
            Space::box_int(&[2], DType::U64, 0, u64::MAX as i128).unwrap(),
        ),
        ("flag", Space::box_int(&[], DType::Bool, 0, 1).unwrap()),
    ]);
    Mp::Map(vec![(Mp::str("observation_space"), space.to_spec())])
}

fn info() -> Mp {
    let d = InfoDict::new()
        .with("lives", 3i64)
        .with("arr", Value::tensor(&[2, 2], &[1i32, 2, 3, 4]))
        .with("f", 2.0)
        .with("u", Value::UInt(u64::MAX))
        .with("neg", -200i64)
        .with("b", Value::Bytes(vec![0, 1]))
        .with(
            "nested",
            InfoDict::new().with(
                "l",
                Value::List(vec![
                    Value::Int(1),
                    "x".into(),
                    Value::None,
                    Value::Bool(true),
                ]),
            ),
        );
    to_mp(&Value::Dict(d))
}

fn s(v: &str) -> String {
    v.to_owned()
}

fn message(name: &str) -> (Message, Vec<Vec<u8>>) {
    let editions = vec![s("2026.06")];
    match name {
        "hello" => (
            Message::Hello {
                generation: s("rlmesh-py-v1"),
                peer: peer(),
                editions,
                preferred: Some(s("2026.06")),
                capabilities: vec![],
                service: s("env"),
                token: s(""),
            },
            vec![],
        ),
        "hello_token" => (
            Message::Hello {
                generation: s("rlmesh-py-v1"),
                peer: peer(),
                editions,
                preferred: Some(s("2026.06")),
                capabilities: vec![],
                service: s("env"),
                token: s("s3cret-t0ken"),
            },
            vec![],
        ),
        "step_request" => (
            Message::Step {
                action: vec![Mp::Int(1)],
                episode_ids: vec![],
                timeout_ms: 0,
                has_action: true,
            },
            vec![],
        ),
        "step_reply" => (
            Message::StepReply {
                obs: vec![],
                reward: 1.0,
                terminated: false,
                truncated: false,
                info: Mp::Nil,
                completed: vec![],
                endpoint_ns: 0,
            },
            vec![obs()],
        ),
        "welcome" => (
            Message::Welcome {
                generation: s("rlmesh-py-v1"),
                peer: peer(),
                editions,
                preferred: Some(s("2026.06")),
                selected: s("2026.06"),
                session_id: s("3f2b6c1e-8d4a-4b7e-9c2d-1a0e5f6b7c8d"),
                contract: contract(),
                capabilities: vec![],
                service: s("env"),
            },
            vec![],
        ),
        "welcome_dict_space" => (
            Message::Welcome {
                generation: s("rlmesh-py-v1"),
                peer: peer(),
                editions,
                preferred: None,
                selected: s("2026.06"),
                session_id: s("s"),
                contract: dict_space_contract(),
                capabilities: vec![(s("shm"), s("1"))],
                service: s("env"),
            },
            vec![],
        ),
        "busy" => (
            Message::Busy {
                message: s("environment already has an active session"),
            },
            vec![],
        ),
        "incompatible" => (
            Message::Incompatible {
                message: s("no"),
                generation: s("rlmesh-py-v1"),
                editions,
                reason: s(""),
            },
            vec![],
        ),
        "incompatible_unauthenticated" => (
            Message::Incompatible {
                message: s(
                    "authentication failed: this endpoint needs a token and the client sent none",
                ),
                generation: s("rlmesh-py-v1"),
                editions: vec![],
                reason: s("unauthenticated"),
            },
            vec![],
        ),
        "reset_request" => (
            Message::Reset {
                seeds: vec![Some(7)],
                options: dict_to_mp(&InfoDict::new().with("difficulty", 2i64)),
                episode_ids: vec![s(EPISODE_ID)],
                env_indices: vec![],
                timeout_ms: 250,
                seed_int: false,
            },
            vec![],
        ),
        "reset_request_unseeded" => (
            Message::Reset {
                seeds: vec![None],
                options: Mp::Nil,
                episode_ids: vec![s(EPISODE_ID)],
                env_indices: vec![],
                timeout_ms: 0,
                seed_int: false,
            },
            vec![],
        ),
        "reset_reply" => (
            Message::ResetReply {
                obs: vec![],
                info: info(),
                endpoint_ns: 1234,
            },
            vec![obs()],
        ),
        "step_request_no_action" => (
            Message::Step {
                action: vec![],
                episode_ids: vec![(0, s(EPISODE_ID))],
                timeout_ms: 5,
                has_action: false,
            },
            vec![],
        ),
        "step_reply_done" => (
            Message::StepReply {
                obs: vec![Mp::Int(1)],
                reward: -0.5,
                terminated: true,
                truncated: false,
                info: Mp::Nil,
                completed: vec![record()],
                endpoint_ns: 99,
            },
            vec![],
        ),
        "step_reply_segments" => (
            Message::StepReply {
                obs: vec![Mp::Int(2), Mp::str("hi")],
                reward: 0.0,
                terminated: false,
                truncated: true,
                info: dict_to_mp(&InfoDict::new().with("k", "v")),
                completed: vec![],
                endpoint_ns: 0,
            },
            vec![
                vec![1, 2, 3],
                [1.5f32, -2.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ],
        ),
        "render_request" => (
            Message::Render {
                env_index: 0,
                timeout_ms: 0,
            },
            vec![],
        ),
        "render_reply" => (
            Message::RenderReply {
                format: Some(s("raw")),
                shape: vec![2, 2, 3],
            },
            vec![(0u8..12).collect()],
        ),
        "render_reply_none" => (
            Message::RenderReply {
                format: None,
                shape: vec![],
            },
            vec![],
        ),
        "close_request" => (Message::Close { reason: s("") }, vec![]),
        "close_reply" => (
            Message::CloseReply {
                final_episodes: vec![record()],
            },
            vec![],
        ),
        "shutdown_request" => (
            Message::Shutdown {
                reason: s("done"),
                token: s(""),
            },
            vec![],
        ),
        "shutdown_request_token" => (
            Message::Shutdown {
                reason: s("done"),
                token: s("s3cret-t0ken"),
            },
            vec![],
        ),
        "shutdown_reply" => (
            Message::ShutdownReply {
                accepted: false,
                message: s("remote shutdown is disabled"),
            },
            vec![],
        ),
        "ping" => (Message::Ping { token: s("") }, vec![]),
        "ping_token" => (
            Message::Ping {
                token: s("s3cret-t0ken"),
            },
            vec![],
        ),
        "pong" => (
            Message::Pong {
                state: s("ready"),
                generation: s("rlmesh-py-v1"),
                service: s("env"),
                sessions: 0,
                limit: 0,
                auth: s(""),
            },
            vec![],
        ),
        "pong_withheld" => (
            Message::Pong {
                state: s("busy"),
                generation: s("rlmesh-py-v1"),
                service: s("env"),
                sessions: 0,
                limit: 0,
                auth: s("required"),
            },
            vec![],
        ),
        "configure" => (
            Message::Configure {
                edition: s("2026.06"),
            },
            vec![],
        ),
        "configure_reply" => (
            Message::ConfigureReply {
                edition: s("2026.06"),
            },
            vec![],
        ),
        "attach_reply" => (Message::AttachReply { attached: false }, vec![]),
        "error_fatal" => (
            Message::Error {
                code: 10,
                message: s("step failed: boom"),
                recoverable: false,
                op: s("step"),
            },
            vec![],
        ),
        "error_recoverable" => (
            Message::Error {
                code: 10,
                message: s("step failed: try again"),
                recoverable: true,
                op: s("step"),
            },
            vec![],
        ),
        "error_protocol" => (
            Message::Error {
                code: 14,
                message: s("not an rlmesh frame"),
                recoverable: false,
                op: s(""),
            },
            vec![],
        ),
        other => panic!("vector {other:?} has no Rust message: add it to rust/tests/golden.rs"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn every_shared_vector_encodes_to_its_bytes() {
    let vectors = load();
    assert!(vectors.len() >= 25, "the shared vector file lost entries");
    for (name, (rid, bytes)) in &vectors {
        let (msg, segments) = message(name);
        let mut out = Vec::new();
        frame::encode_frame(&mut out, msg.kind(), *rid, &msg.header(), &segments);
        assert_eq!(hex(&out), hex(bytes), "vector {name}");
    }
}

#[test]
fn every_shared_vector_decodes_to_its_message() {
    for (name, (rid, bytes)) in load() {
        let (msg, segments) = message(&name);
        let plan = frame::decode_prefix(&bytes[..PREFIX_SIZE], &FrameLimits::DEFAULT).unwrap();
        assert_eq!(plan.request_id, rid, "{name}");
        let frame = frame::split_body(&plan, bytes[PREFIX_SIZE..].to_vec()).unwrap();
        assert_eq!(
            Message::decode(frame.kind, frame.header()).unwrap(),
            msg,
            "vector {name}"
        );
        let got: Vec<Vec<u8>> = frame.segments().iter().map(|s| s.to_vec()).collect();
        assert_eq!(got, segments, "vector {name}");
    }
}

#[test]
fn the_shared_contract_spaces_parse_back() {
    let vectors = load();
    for name in ["welcome", "welcome_dict_space"] {
        let (_, bytes) = &vectors[name];
        let plan = frame::decode_prefix(&bytes[..PREFIX_SIZE], &FrameLimits::DEFAULT).unwrap();
        let frame = frame::split_body(&plan, bytes[PREFIX_SIZE..].to_vec()).unwrap();
        let Message::Welcome { contract, .. } =
            Message::decode(frame.kind, frame.header()).unwrap()
        else {
            panic!()
        };
        let spec = contract.get("observation_space").unwrap();
        let space = Space::from_spec(spec).unwrap();
        assert_eq!(
            msgpack::decode(&space.to_spec().to_bytes()).unwrap(),
            *spec,
            "{name}"
        );
    }
}

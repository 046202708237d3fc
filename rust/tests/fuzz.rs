//! Hostile input never panics and never takes the server down (hand-written fuzzing:
//! a small deterministic generator, no external crate).
//!
//! - The decoders (msgpack, frame prefix and body, message headers, space specs,
//!   metadata values, the leaf codec) get random bytes, random msgpack trees and
//!   mutations of valid frames; they must return `Ok` or `Err`, never panic.
//! - A live server gets garbage, truncated and mutated frames on many connections,
//!   inside and outside a session, and must still answer `Ping` and serve a session.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use rlmesh::frame::{self, FrameLimits, PREFIX_SIZE};
use rlmesh::msgpack::{self, Mp};
use rlmesh::value::{dict_from_mp, from_mp};
use rlmesh::wire::{kind, Message, PeerInfo};
use rlmesh::{DType, Env, EnvServer, InfoDict, RemoteEnv, Result, Space, Value};

/// xorshift64*: deterministic, so a failure reproduces.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn mp(&mut self, depth: u32) -> Mp {
        match self.below(if depth > 6 { 8 } else { 11 }) {
            0 => Mp::Nil,
            1 => Mp::Bool(self.below(2) == 1),
            2 => Mp::Int(self.next() as i64 >> self.below(64)),
            3 => Mp::UInt(self.next() | 1 << 63),
            4 => Mp::Float(f64::from_bits(self.next())),
            5 => Mp::Str(
                [
                    "", "kind", "box", "discrete", "dict", "shape", "details", "spaces", "n", "x",
                ][self.below(10) as usize]
                    .into(),
            ),
            6 => {
                let n = self.below(20) as usize;
                Mp::Bin(self.bytes(n))
            }
            7 => {
                let mut data = vec![self.below(14) as u8, self.below(4) as u8];
                let n = self.below(40) as usize;
                data.extend(self.bytes(n));
                Mp::Ext(if self.below(4) == 0 { 5 } else { 1 }, data)
            }
            8 => Mp::Array((0..self.below(5)).map(|_| self.mp(depth + 1)).collect()),
            _ => Mp::Map(
                (0..self.below(5))
                    .map(|_| (self.mp(depth + 1), self.mp(depth + 1)))
                    .collect(),
            ),
        }
    }
    fn mutate(&mut self, mut b: Vec<u8>) -> Vec<u8> {
        for _ in 0..=self.below(4) {
            if b.is_empty() {
                break;
            }
            let i = self.below(b.len() as u64) as usize;
            match self.below(5) {
                0 => b[i] ^= 1 << self.below(8),
                1 => b[i] = self.next() as u8,
                2 => b.truncate(i),
                3 => b.insert(i, self.next() as u8),
                _ => {
                    // a length field of the prefix set to something large
                    let at = [8usize, 12, 16][self.below(3) as usize];
                    if b.len() >= at + 4 {
                        b[at..at + 4].copy_from_slice(&(self.next() as u32).to_le_bytes());
                    }
                }
            }
        }
        b
    }
}

fn valid_frames() -> Vec<Vec<u8>> {
    let msgs = [
        Message::Hello {
            generation: "rlmesh-py-v1".into(),
            peer: PeerInfo::default(),
            editions: vec!["2026.06".into()],
            preferred: None,
            capabilities: vec![],
            service: "env".into(),
            token: String::new(),
        },
        Message::Reset {
            seeds: vec![Some(1)],
            options: Mp::Map(vec![(Mp::str("a"), Mp::Int(1))]),
            episode_ids: vec!["e".into()],
            env_indices: vec![],
            timeout_ms: 0,
            seed_int: false,
        },
        Message::Step {
            action: vec![Mp::Int(1)],
            episode_ids: vec![(0, "e".into())],
            timeout_ms: 0,
            has_action: true,
        },
        Message::Render {
            env_index: 0,
            timeout_ms: 0,
        },
        Message::Ping {
            token: String::new(),
        },
        Message::Configure {
            edition: "2026.06".into(),
        },
    ];
    msgs.iter()
        .map(|m| {
            let mut out = Vec::new();
            let segs: Vec<Vec<u8>> = if matches!(m, Message::Step { .. }) {
                vec![vec![0u8; 8]]
            } else {
                vec![]
            };
            frame::encode_frame(&mut out, m.kind(), 3, &m.header(), &segs);
            out
        })
        .collect()
}

fn decode_everything(bytes: &[u8], spaces: &[Space]) {
    if let Ok(mp) = msgpack::decode(bytes) {
        let _ = from_mp(&mp);
        let _ = dict_from_mp(&mp);
        let _ = Space::from_spec(&mp);
        if let Mp::Array(items) = &mp {
            for space in spaces {
                let _ = space.join(items, &[bytes, &bytes[..bytes.len() / 2]]);
            }
        }
    }
    for k in [
        kind::HELLO,
        kind::RESET,
        kind::STEP,
        kind::RENDER,
        kind::WELCOME,
        kind::STEP_REPLY,
        kind::CLOSE_REPLY,
        kind::ERROR,
        0x42,
    ] {
        let _ = Message::decode(k, bytes);
    }
    if bytes.len() >= PREFIX_SIZE {
        for limits in [FrameLimits::DEFAULT, FrameLimits::PRE_HANDSHAKE] {
            if let Ok(plan) = frame::decode_prefix(&bytes[..PREFIX_SIZE], &limits) {
                let body = &bytes[PREFIX_SIZE..];
                if body.len() as u64 == plan.body_len {
                    if let Ok(f) = frame::split_body(&plan, body.to_vec()) {
                        let _ = Message::decode(f.kind, f.header());
                        let _ = f.segments();
                    }
                }
            }
        }
    }
}

#[test]
fn decoders_never_panic_on_random_and_mutated_bytes() {
    let spaces = vec![
        Space::discrete(3),
        Space::box_uniform(&[2], DType::F32, -1.0, 1.0).unwrap(),
        Space::dict([
            ("a", Space::text(4)),
            (
                "b",
                Space::tuple([Space::multi_binary(&[2]), Space::discrete(2)]),
            ),
        ]),
    ];
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let frames = valid_frames();
    for round in 0..20_000 {
        let bytes = match round % 4 {
            0 => {
                let n = g.below(64) as usize;
                g.bytes(n)
            }
            1 => g.mp(0).to_bytes(),
            2 => {
                let f = frames[g.below(frames.len() as u64) as usize].clone();
                g.mutate(f)
            }
            _ => {
                let b = g.mp(0).to_bytes();
                g.mutate(b)
            }
        };
        decode_everything(&bytes, &spaces);
    }
    // deep nesting is refused, not followed
    let mut deep = vec![0x91u8; 100_000];
    deep.push(0xc0);
    assert!(msgpack::decode(&deep).is_err());
    let mut deep_map = vec![];
    for _ in 0..100_000 {
        deep_map.extend_from_slice(&[0x81, 0xa1, b'k']);
    }
    deep_map.push(0xc0);
    assert!(msgpack::decode(&deep_map).is_err());
}

struct Echo;

impl Env for Echo {
    fn observation_space(&self) -> Space {
        Space::box_uniform(&[2], DType::F32, -1.0, 1.0).unwrap()
    }
    fn action_space(&self) -> Space {
        Space::dict([
            ("k", Space::discrete(3)),
            (
                "v",
                Space::box_uniform(&[2], DType::F32, -1.0, 1.0).unwrap(),
            ),
        ])
    }
    fn reset(&mut self, _: Option<i64>, _: Option<&InfoDict>) -> Result<(Value, InfoDict)> {
        Ok((Value::tensor(&[2], &[0.0f32, 0.0]), InfoDict::new()))
    }
    fn step(&mut self, _: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        Ok((
            Value::tensor(&[2], &[0.5f32, 0.5]),
            1.0,
            false,
            false,
            InfoDict::new(),
        ))
    }
}

#[test]
fn a_server_survives_hostile_connections() {
    let bound = EnvServer::new(Echo).unwrap().bind("127.0.0.1:0").unwrap();
    let addr = bound.local_addr().to_string();
    let handle = bound.handle();
    let join = thread::spawn(move || bound.serve());
    let tcp = addr.trim_start_matches("tcp://").to_owned();
    let mut g = Gen(0xDEAD_BEEF_CAFE_F00D);
    let frames = valid_frames();
    let hello = frames[0].clone();
    for round in 0..300 {
        let Ok(mut s) = TcpStream::connect(&tcp) else {
            continue;
        };
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let in_session = round % 2 == 0;
        if in_session {
            s.write_all(&hello).unwrap();
            let mut prefix = [0u8; PREFIX_SIZE];
            if s.read_exact(&mut prefix).is_err() {
                continue;
            }
            let plan = frame::decode_prefix(&prefix, &FrameLimits::DEFAULT).unwrap();
            let mut body = vec![0u8; plan.body_len as usize];
            s.read_exact(&mut body).unwrap();
        }
        let payload = match round % 3 {
            0 => {
                let n = g.below(200) as usize;
                g.bytes(n)
            }
            1 => {
                let f = frames[1 + g.below(frames.len() as u64 - 1) as usize].clone();
                g.mutate(f)
            }
            _ => {
                let m = g.mp(0);
                let mut out = Vec::new();
                frame::encode_frame(
                    &mut out,
                    [kind::RESET, kind::STEP, kind::RENDER, kind::CONFIGURE, 0x55]
                        [g.below(5) as usize],
                    9,
                    &m.to_bytes(),
                    &[] as &[&[u8]],
                );
                out
            }
        };
        let _ = s.write_all(&payload);
        let mut sink = [0u8; 4096];
        let _ = s.read(&mut sink); // an Error frame, a reply, or nothing: never a crash
    }
    // still serving: a probe and a whole session work
    assert!(matches!(
        RemoteEnv::ping(&addr).unwrap().as_str(),
        "ready" | "busy"
    ));
    // the last hostile session ends once the server reads its EOF: retry while busy
    let mut env = None;
    for _ in 0..100 {
        match RemoteEnv::connect(&addr) {
            Ok(e) => {
                env = Some(e);
                break;
            }
            Err(e) if e.code() == rlmesh::ErrorCode::Busy => {
                thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut env = env.expect("the endpoint frees up after hostile sessions");
    env.reset(None, None).unwrap();
    let action = Value::Dict(
        InfoDict::new()
            .with("k", 2i64)
            .with("v", Value::tensor(&[2], &[0.1f32, 0.2])),
    );
    assert_eq!(env.step(Some(&action)).unwrap().1, 1.0);
    env.close().unwrap();
    handle.stop();
    join.join().unwrap().unwrap();
}

//! CartPole in Rust, with Gymnasium's `CartPole-v1` dynamics, served with one call.
//!
//! ```text
//! cargo run --release --example cartpole -- 127.0.0.1:0
//! cargo run --release --example cartpole -- unix:///tmp/cartpole.sock
//! ```
//!
//! The first line printed is the bound address (`tcp://127.0.0.1:PORT`); Python
//! drives it unchanged: `rlmesh.numpy.RemoteEnv(address)`, `rlmesh.run(model, address)`.
//! With `RLMESH_ALLOW_REMOTE_SHUTDOWN=1` a client may stop it; on exit it prints the
//! server-side time per request to stderr.

use rlmesh::{DType, Env, EnvServer, Error, InfoDict, Result, Space, Value};

/// Gymnasium's CartPole-v1: same constants, Euler integration, 500-step time limit.
pub struct CartPole {
    state: [f64; 4],
    rng: u64,
    steps: u32,
    steps_beyond_terminated: Option<u32>,
    render_mode: Option<String>,
}

const GRAVITY: f64 = 9.8;
const MASSCART: f64 = 1.0;
const MASSPOLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASSPOLE + MASSCART;
const LENGTH: f64 = 0.5;
const POLEMASS_LENGTH: f64 = MASSPOLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
const TAU: f64 = 0.02;
const THETA_THRESHOLD: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_THRESHOLD: f64 = 2.4;
const MAX_EPISODE_STEPS: u32 = 500;

impl CartPole {
    pub fn new(render_mode: Option<String>) -> CartPole {
        CartPole { state: [0.0; 4], rng: 0x853c_49e6_748f_ea9b, steps: 0, steps_beyond_terminated: None, render_mode }
    }

    fn next_f64(&mut self) -> f64 {
        // SplitMix64 -> a double in [0, 1)
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn obs(&self) -> Value {
        let s = self.state;
        Value::tensor(&[4], &[s[0] as f32, s[1] as f32, s[2] as f32, s[3] as f32])
    }
}

impl Env for CartPole {
    fn observation_space(&self) -> Space {
        // float32-rounded as Gymnasium's float32 Box holds them; its float32-max velocity
        // bounds are published as unbounded, so they are infinite here too
        let high = [(X_THRESHOLD * 2.0) as f32 as f64, f64::INFINITY, (THETA_THRESHOLD * 2.0) as f32 as f64, f64::INFINITY];
        let low = high.map(|h| -h);
        Space::box_elementwise(&[4], DType::F32, &low, &high).expect("valid bounds")
    }

    fn action_space(&self) -> Space {
        Space::discrete(2)
    }

    fn reset(&mut self, seed: Option<i64>, _options: Option<&InfoDict>) -> Result<(Value, InfoDict)> {
        if let Some(seed) = seed {
            self.rng = seed as u64 ^ 0x5851_F42D_4C95_7F2D;
        }
        for i in 0..4 {
            // uniform in [-0.05, 0.05), held at float32 precision so the first observation
            // is the exact state (a Gymnasium CartPole set to it follows the same trajectory)
            self.state[i] = (-0.05 + 0.1 * self.next_f64()) as f32 as f64;
        }
        self.steps = 0;
        self.steps_beyond_terminated = None;
        Ok((self.obs(), InfoDict::new()))
    }

    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        let action = action.and_then(|a| a.as_i64()).ok_or_else(|| Error::invalid_action("CartPole needs an action 0 or 1"))?;
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let (sintheta, costheta) = theta.sin_cos();
        let temp = (force + POLEMASS_LENGTH * theta_dot * theta_dot * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta * costheta / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
        self.state = [x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc];
        let [x, _, theta, _] = self.state;
        let terminated = !(-X_THRESHOLD..=X_THRESHOLD).contains(&x) || !(-THETA_THRESHOLD..=THETA_THRESHOLD).contains(&theta);
        let reward = if !terminated {
            1.0
        } else if self.steps_beyond_terminated.is_none() {
            self.steps_beyond_terminated = Some(0);
            1.0
        } else {
            0.0
        };
        self.steps += 1;
        let truncated = self.steps >= MAX_EPISODE_STEPS;
        Ok((self.obs(), reward, terminated, truncated, InfoDict::new()))
    }

    fn render(&mut self) -> Result<Option<Value>> {
        if self.render_mode.as_deref() != Some("rgb_array") {
            return Ok(None);
        }
        // a small top view: white field, black cart, brown pole
        let (h, w) = (60usize, 120usize);
        let mut img = vec![255u8; h * w * 3];
        let mut put = |y: i64, x: i64, rgb: [u8; 3]| {
            if (0..h as i64).contains(&y) && (0..w as i64).contains(&x) {
                let i = (y as usize * w + x as usize) * 3;
                img[i..i + 3].copy_from_slice(&rgb);
            }
        };
        let scale = w as f64 / (X_THRESHOLD * 2.0);
        let cx = (self.state[0] * scale + w as f64 / 2.0) as i64;
        let cy = 45i64;
        for dy in -3..=3 {
            for dx in -8..=8 {
                put(cy + dy, cx + dx, [0, 0, 0]);
            }
        }
        let pole = 2.0 * LENGTH * scale * 0.6;
        for k in 0..=30 {
            let t = k as f64 / 30.0 * pole;
            put(cy - (t * self.state[2].cos()) as i64, cx + (t * self.state[2].sin()) as i64, [202, 152, 101]);
        }
        Ok(Some(Value::tensor(&[h, w, 3], &img)))
    }

    fn render_mode(&self) -> Option<String> {
        self.render_mode.clone()
    }

    fn metadata(&self) -> Option<InfoDict> {
        Some(InfoDict::new().with("render_modes", Value::List(vec!["rgb_array".into()])).with("render_fps", 50i64))
    }

    fn id(&self) -> Option<String> {
        Some("CartPole-v1".into())
    }
}

fn main() {
    let address = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let render_mode = std::env::args().nth(2);
    let run = || -> Result<()> {
        let bound = EnvServer::new(CartPole::new(render_mode))?.bind(&address)?;
        println!("{}", bound.local_addr()); // the first line: where to connect
        let handle = bound.handle();
        let out = bound.serve();
        let stats = handle.stats();
        if stats.requests > 0 {
            eprintln!(
                "server-side: {} requests, mean {} ns per request ({} ns before the send syscall)",
                stats.requests,
                stats.busy_ns / stats.requests,
                stats.handle_ns / stats.requests
            );
        }
        out
    };
    if let Err(e) = run() {
        eprintln!("cartpole: {e}");
        std::process::exit(1);
    }
}

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

/// Gymnasium's CartPole-v1: same constants, Euler integration, 500-step time limit, and
/// the same seeding (NumPy's `PCG64(SeedSequence(seed))`), so a seed gives the very
/// episode `gym.make("CartPole-v1")` gives.
pub struct CartPole {
    state: [f64; 4],
    rng: Pcg64,
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
        CartPole {
            state: [0.0; 4],
            rng: Pcg64::from_seed(0),
            steps: 0,
            steps_beyond_terminated: None,
            render_mode,
        }
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
        let high = [
            (X_THRESHOLD * 2.0) as f32 as f64,
            f64::INFINITY,
            (THETA_THRESHOLD * 2.0) as f32 as f64,
            f64::INFINITY,
        ];
        let low = high.map(|h| -h);
        Space::box_elementwise(&[4], DType::F32, &low, &high).expect("valid bounds")
    }

    fn action_space(&self) -> Space {
        Space::discrete(2)
    }

    fn reset(
        &mut self,
        seed: Option<i64>,
        _options: Option<&InfoDict>,
    ) -> Result<(Value, InfoDict)> {
        if let Some(seed) = seed {
            if seed < 0 {
                return Err(Error::environment(format!(
                    "Seed must be a non-negative integer, got {seed}"
                )));
            }
            self.rng = Pcg64::from_seed(seed as u64);
        }
        for i in 0..4 {
            self.state[i] = -0.05 + (0.05 - -0.05) * self.rng.next_f64(); // np_random.uniform(-0.05, 0.05)
        }
        self.steps = 0;
        self.steps_beyond_terminated = None;
        Ok((self.obs(), InfoDict::new()))
    }

    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        let action = action
            .and_then(|a| a.as_i64())
            .ok_or_else(|| Error::invalid_action("CartPole needs an action 0 or 1"))?;
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let (sintheta, costheta) = theta.sin_cos();
        // the operation order of gymnasium/envs/classic_control/cartpole.py, for the same rounding
        let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp)
            / (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
        self.state = [
            x + TAU * x_dot,
            x_dot + TAU * xacc,
            theta + TAU * theta_dot,
            theta_dot + TAU * thetaacc,
        ];
        let [x, _, theta, _] = self.state;
        let terminated = !(-X_THRESHOLD..=X_THRESHOLD).contains(&x)
            || !(-THETA_THRESHOLD..=THETA_THRESHOLD).contains(&theta);
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
            put(
                cy - (t * self.state[2].cos()) as i64,
                cx + (t * self.state[2].sin()) as i64,
                [202, 152, 101],
            );
        }
        Ok(Some(Value::tensor(&[h, w, 3], &img)))
    }

    fn render_mode(&self) -> Option<String> {
        self.render_mode.clone()
    }

    fn metadata(&self) -> Option<InfoDict> {
        Some(
            InfoDict::new()
                .with("render_modes", Value::List(vec!["rgb_array".into()]))
                .with("render_fps", 50i64)
                // as a Python-served gym.make("CartPole-v1") publishes it (clients build
                // a Gymnasium spec with this time limit)
                .with("max_episode_steps", MAX_EPISODE_STEPS as i64),
        )
    }

    fn id(&self) -> Option<String> {
        Some("CartPole-v1".into())
    }
}

/// NumPy's `PCG64` (XSL-RR 128/64) seeded through `SeedSequence`, as
/// `gymnasium.utils.seeding.np_random(seed)` builds it.
struct Pcg64 {
    state: u128,
    inc: u128,
}

const PCG_MULT: u128 = (2_549_297_995_355_413_924u128 << 64) + 4_865_540_595_714_422_341;

impl Pcg64 {
    fn from_seed(seed: u64) -> Pcg64 {
        let words = seed_sequence_state(seed);
        let initstate = (words[0] as u128) << 64 | words[1] as u128;
        let initseq = (words[2] as u128) << 64 | words[3] as u128;
        let mut rng = Pcg64 {
            state: 0,
            inc: (initseq << 1) | 1,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    fn next_u64(&mut self) -> u64 {
        self.step();
        let folded = (self.state >> 64) as u64 ^ self.state as u64;
        folded.rotate_right((self.state >> 122) as u32)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// `numpy.random.SeedSequence(seed).generate_state(4, numpy.uint64)`.
fn seed_sequence_state(seed: u64) -> [u64; 4] {
    const INIT_A: u32 = 0x43b0_d7e5;
    const MULT_A: u32 = 0x931e_8875;
    const INIT_B: u32 = 0x8b51_f9dd;
    const MULT_B: u32 = 0x58f3_8ded;
    const MIX_MULT_L: u32 = 0xca01_f9dd;
    const MIX_MULT_R: u32 = 0x4973_f715;
    let entropy: Vec<u32> = if seed >> 32 == 0 {
        vec![seed as u32]
    } else {
        vec![seed as u32, (seed >> 32) as u32]
    };
    let mut hash_const = INIT_A;
    let mut hashmix = |mut value: u32| -> u32 {
        value ^= hash_const;
        hash_const = hash_const.wrapping_mul(MULT_A);
        value = value.wrapping_mul(hash_const);
        value ^ (value >> 16)
    };
    let mix = |x: u32, y: u32| -> u32 {
        let r = MIX_MULT_L
            .wrapping_mul(x)
            .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
        r ^ (r >> 16)
    };
    let mut pool = [0u32; 4];
    for (i, slot) in pool.iter_mut().enumerate() {
        *slot = hashmix(entropy.get(i).copied().unwrap_or(0));
    }
    for src in 0..4 {
        for dst in 0..4 {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    let mut hash_b = INIT_B;
    let mut out32 = [0u32; 8];
    for (i, slot) in out32.iter_mut().enumerate() {
        let mut v = pool[i % 4] ^ hash_b;
        hash_b = hash_b.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hash_b);
        *slot = v ^ (v >> 16);
    }
    [0, 1, 2, 3].map(|k| out32[2 * k] as u64 | (out32[2 * k + 1] as u64) << 32)
}

fn main() {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    // the second argument is the render mode served (published in the contract):
    // `rgb_array`, or nothing / `none` for no rendering
    let render_mode = match std::env::args().nth(2).as_deref() {
        None | Some("") | Some("none") => None,
        Some("rgb_array") => Some("rgb_array".to_owned()),
        Some(other) => {
            eprintln!("cartpole: render mode {other:?} is not supported; use rgb_array or none");
            std::process::exit(2);
        }
    };
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

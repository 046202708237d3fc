//! A small env whose actions choose how it fails: the test double the Python
//! integration tests (`tests/integration/test_rust_env.py`) drive to check RENV-6.
//!
//! Observation `Box(2,) float32`: `[steps taken, last action]`. Action `Discrete(6)`:
//! 0 steps normally (reward 1, terminated after 5 steps), 1 fails recoverably, 2 fails
//! fatally, 3 panics, 4 returns an observation of the wrong shape, 5 truncates.
//! `reset(options={"fail": true})` fails recoverably. `render()` returns a CHW float
//! frame (`[3, 2, 5]`, one value of 300) that the server casts to uint8 and transposes.
//!
//! ```text
//! cargo run --example faulty -- 127.0.0.1:0
//! ```

use rlmesh::{DType, Env, EnvServer, Error, InfoDict, Result, Space, Value};

#[derive(Default)]
struct Faulty {
    steps: i64,
}

impl Env for Faulty {
    fn observation_space(&self) -> Space {
        Space::box_uniform(&[2], DType::F32, -100.0, 100.0).expect("valid bounds")
    }

    fn action_space(&self) -> Space {
        Space::discrete(6)
    }

    fn reset(
        &mut self,
        seed: Option<i64>,
        options: Option<&InfoDict>,
    ) -> Result<(Value, InfoDict)> {
        if options.and_then(|o| o.get("fail")) == Some(&Value::Bool(true)) {
            return Err(Error::environment_recoverable("reset refused by options"));
        }
        self.steps = 0;
        let mut info =
            InfoDict::new().with("seed_seen", seed.map(Value::Int).unwrap_or(Value::None));
        if let Some(o) = options {
            info.insert("options_seen", Value::Dict(o.clone()));
        }
        Ok((Value::tensor(&[2], &[0.0f32, -1.0]), info))
    }

    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        let a = action.as_ref().and_then(Value::as_i64).unwrap_or(-1);
        match a {
            1 => return Err(Error::environment_recoverable("try again")),
            2 => return Err(Error::environment("boom")),
            3 => panic!("kaboom"),
            4 => {
                return Ok((
                    Value::tensor(&[3], &[0.0f32; 3]),
                    0.0,
                    false,
                    false,
                    InfoDict::new(),
                ))
            }
            _ => {}
        }
        self.steps += 1;
        let obs = Value::tensor(&[2], &[self.steps as f32, a as f32]);
        let info = InfoDict::new().with("had_action", action.is_some());
        Ok((obs, 1.0, a == 0 && self.steps >= 5, a == 5, info))
    }

    fn render(&mut self) -> Result<Option<Value>> {
        let mut chw: Vec<f32> = (0..30).map(|v| v as f32).collect();
        chw[0] = 300.0; // cast, not clamped: 300 -> 44
        Ok(Some(Value::tensor(&[3, 2, 5], &chw)))
    }

    fn render_mode(&self) -> Option<String> {
        Some("rgb_array".into())
    }

    fn id(&self) -> Option<String> {
        Some("Faulty-v0".into())
    }
}

fn main() {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let run = || -> Result<()> {
        let bound = EnvServer::new(Faulty::default())?.bind(&address)?;
        println!("{}", bound.local_addr());
        bound.serve()
    };
    if let Err(e) = run() {
        eprintln!("faulty: {e}");
        std::process::exit(1);
    }
}

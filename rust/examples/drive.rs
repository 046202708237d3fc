//! Drive any rlmesh env endpoint (Python- or Rust-served) from Rust with `RemoteEnv`.
//!
//! ```text
//! cargo run --release --example drive -- tcp://127.0.0.1:5555 3      # 3 episodes
//! cargo run --release --example drive -- tcp://127.0.0.1:5555 --bench 20000
//! ```
//!
//! Episodes use a CartPole policy (push toward the pole's lean) when the observation
//! is a 4-vector, else action 0; one line per episode: `episode I seed S steps N
//! reward R terminated T truncated U`. `--bench N` times N steps and prints
//! `bench steps N mean_ns M`.

use std::time::Instant;

use rlmesh::{RemoteEnv, Result, Value};

fn policy(obs: &Value) -> Value {
    match obs.as_tensor() {
        Some(t) if t.numel() == 4 => Value::Int((t.get_f64(2) > 0.0) as i64),
        _ => Value::Int(0),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let address = args.next().unwrap_or_else(|| "127.0.0.1:5555".into());
    let rest: Vec<String> = args.collect();
    let run = || -> Result<()> {
        let mut env = RemoteEnv::connect(&address)?;
        println!(
            "connected {} id {} edition {}",
            env.address(),
            env.env_id(),
            env.selected_workflow_edition()
        );
        if rest.first().map(String::as_str) == Some("--bench") {
            let n: u64 = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
            let (mut obs, _) = env.reset(Some(0), None)?;
            let start = Instant::now();
            for _ in 0..n {
                let (o, _, terminated, truncated, _) = env.step(Some(&policy(&obs)))?;
                obs = if terminated || truncated {
                    env.reset(None, None)?.0
                } else {
                    o
                };
            }
            println!(
                "bench steps {n} mean_ns {}",
                start.elapsed().as_nanos() as u64 / n.max(1)
            );
        } else {
            let episodes: i64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(3);
            for i in 0..episodes {
                let seed = i + 1;
                let (mut obs, _) = env.reset(Some(seed), None)?;
                let (mut steps, mut total) = (0u64, 0.0f64);
                loop {
                    let (o, r, terminated, truncated, _) = env.step(Some(&policy(&obs)))?;
                    steps += 1;
                    total += r;
                    obs = o;
                    if terminated || truncated || steps >= 10_000 {
                        println!("episode {i} seed {seed} steps {steps} reward {total} terminated {terminated} truncated {truncated}");
                        break;
                    }
                }
            }
        }
        env.close()
    };
    if let Err(e) = run() {
        eprintln!("drive: {e}");
        std::process::exit(1);
    }
}

//! The `Env` trait (seed 004, RENV-1..5).

use crate::error::Result;
use crate::space::Space;
use crate::value::{InfoDict, Metadata, Value};

/// One environment in Gymnasium shape.
///
/// `reset` returns `(observation, info)` and `step` returns `(observation, reward,
/// terminated, truncated, info)`, as Gymnasium's do. The server reads the spaces,
/// `render_mode`, `metadata` and `id` once, when it is built.
///
/// A failure is an [`Error`](crate::Error): return
/// [`Error::environment_recoverable`](crate::Error::environment_recoverable) to fail
/// one request and keep the client's session; any other error ends it, and the
/// client reads `[INTERNAL] {op} failed: {message}`.
///
/// Also available as `rlmesh::Env`.
///
/// ```
/// use rlmesh::{DType, Env, InfoDict, Result, Space, Value};
///
/// struct Counter { n: i64 }
///
/// impl Env for Counter {
///     fn observation_space(&self) -> Space { Space::discrete(100) }
///     fn action_space(&self) -> Space { Space::discrete(2) }
///     fn reset(&mut self, _seed: Option<i64>, _options: Option<&InfoDict>) -> Result<(Value, InfoDict)> {
///         self.n = 0;
///         Ok((Value::Int(0), InfoDict::new()))
///     }
///     fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
///         self.n += action.and_then(|a| a.as_i64()).unwrap_or(0);
///         Ok((Value::Int(self.n), 1.0, self.n >= 99, false, InfoDict::new()))
///     }
/// }
///
/// let mut env = Counter { n: 0 };
/// env.reset(Some(1), None).unwrap();
/// assert_eq!(env.step(Some(Value::Int(1))).unwrap().0, Value::Int(1));
/// assert_eq!(env.id(), None); // served as "UnknownEnv-v1"
/// ```
pub trait Env {
    /// The space observations belong to.
    fn observation_space(&self) -> Space;

    /// The space actions belong to.
    fn action_space(&self) -> Space;

    /// Start an episode with an optional seed and reset options.
    fn reset(&mut self, seed: Option<i64>, options: Option<&InfoDict>)
        -> Result<(Value, InfoDict)>;

    /// Apply one action. The action is `None` when the request carries none.
    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)>;

    /// The current frame as an image value (cast to uint8; `[H, W, 3]`, `[H, W, 4]`,
    /// `[3, H, W]`, `[4, H, W]` or `[H, W]` are encoded, any other shape gives no
    /// frame). `None` (the default) is no frame.
    fn render(&mut self) -> Result<Option<Value>> {
        Ok(None)
    }

    /// Release the env's resources. The default does nothing, as
    /// `gymnasium.Env.close` does.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }

    /// The render mode; `None` by default.
    fn render_mode(&self) -> Option<String> {
        None
    }

    /// The metadata dictionary; `None` by default. Its `autoreset_mode` key sets the
    /// served autoreset mode.
    fn metadata(&self) -> Option<Metadata> {
        None
    }

    /// The environment identifier; `None` serves `"UnknownEnv-v1"`.
    fn id(&self) -> Option<String> {
        None
    }
}

impl<E: Env + ?Sized> Env for Box<E> {
    fn observation_space(&self) -> Space {
        (**self).observation_space()
    }
    fn action_space(&self) -> Space {
        (**self).action_space()
    }
    fn reset(
        &mut self,
        seed: Option<i64>,
        options: Option<&InfoDict>,
    ) -> Result<(Value, InfoDict)> {
        (**self).reset(seed, options)
    }
    fn step(&mut self, action: Option<Value>) -> Result<(Value, f64, bool, bool, InfoDict)> {
        (**self).step(action)
    }
    fn render(&mut self) -> Result<Option<Value>> {
        (**self).render()
    }
    fn close(&mut self) -> Result<()> {
        (**self).close()
    }
    fn render_mode(&self) -> Option<String> {
        (**self).render_mode()
    }
    fn metadata(&self) -> Option<Metadata> {
        (**self).metadata()
    }
    fn id(&self) -> Option<String> {
        (**self).id()
    }
}

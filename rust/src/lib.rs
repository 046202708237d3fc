//! # rlmesh (Rust)
//!
//! Serve a simulator written in Rust over the rlmesh wire protocol, and drive rlmesh
//! env endpoints from Rust.
//!
//! - Implement [`Env`] (seed 004): spaces, `reset`, `step` and optionally `render`,
//!   `close`, `render_mode`, `metadata`, `id`.
//! - Serve it: `EnvServer::new(env)?.bind("127.0.0.1:0")?.serve()`; the Python
//!   clients (`rlmesh.numpy.RemoteEnv`, `rlmesh.run(...)`) drive it unchanged.
//! - Drive any endpoint (Python- or Rust-served) with [`RemoteEnv`].
//!
//! std only: the msgpack subset, frames and values are implemented here and pinned
//! byte for byte against the Python reference by the shared vectors in
//! `tests/vectors/`. See `docs/rust.md`.

pub mod client;
pub mod env;
pub mod error;
pub mod frame;
pub mod ids;
pub mod msgpack;
pub mod server;
pub mod space;
pub mod transport;
pub mod value;
pub mod wire;

pub use client::RemoteEnv;
pub use env::Env;
pub use error::{Error, ErrorCode, ErrorKind, Result};
pub use server::{
    AutoresetMode, BoundEnvServer, EnvServer, ServeOptions, ServerHandle, ServerStats,
    ValidationPolicy,
};
pub use space::{Bounds, Space};
pub use transport::Address;
pub use value::{DType, Element, InfoDict, Metadata, Tensor, Value};

//! Errors (ERR-1..3, RENV-6): a wire code, a message, and whether the session survives.

use std::fmt;

/// Error codes as the wire numbers them (docs/protocol.md §9, ERR-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Unspecified,
    Timeout,
    InvalidAction,
    NotReady,
    Busy,
    Unsupported,
    Internal,
    Crashed,
    Cancelled,
    Closed,
    Protocol,
}

impl ErrorCode {
    /// The wire number.
    pub fn number(self) -> i64 {
        match self {
            ErrorCode::Unspecified => 0,
            ErrorCode::Timeout => 1,
            ErrorCode::InvalidAction => 2,
            ErrorCode::NotReady => 3,
            ErrorCode::Busy => 4,
            ErrorCode::Unsupported => 5,
            ErrorCode::Internal => 10,
            ErrorCode::Crashed => 11,
            ErrorCode::Cancelled => 12,
            ErrorCode::Closed => 13,
            ErrorCode::Protocol => 14,
        }
    }

    /// The code of a wire number (unknown numbers read as `Unspecified`).
    pub fn from_number(n: i64) -> ErrorCode {
        match n {
            1 => ErrorCode::Timeout,
            2 => ErrorCode::InvalidAction,
            3 => ErrorCode::NotReady,
            4 => ErrorCode::Busy,
            5 => ErrorCode::Unsupported,
            10 => ErrorCode::Internal,
            11 => ErrorCode::Crashed,
            12 => ErrorCode::Cancelled,
            13 => ErrorCode::Closed,
            14 => ErrorCode::Protocol,
            _ => ErrorCode::Unspecified,
        }
    }

    /// SCREAMING_SNAKE label used in messages (`[INTERNAL] ...`, ERR-2).
    pub fn label(self) -> &'static str {
        match self {
            ErrorCode::Unspecified => "UNSPECIFIED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::InvalidAction => "INVALID_ACTION",
            ErrorCode::NotReady => "NOT_READY",
            ErrorCode::Busy => "BUSY",
            ErrorCode::Unsupported => "UNSUPPORTED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::Crashed => "CRASHED",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::Closed => "CLOSED",
            ErrorCode::Protocol => "PROTOCOL",
        }
    }

    /// Default recoverability of a code (ERR-1): TIMEOUT, INVALID_ACTION, NOT_READY,
    /// BUSY and UNSUPPORTED are recoverable.
    pub fn default_recoverable(self) -> bool {
        matches!(
            self,
            ErrorCode::Timeout
                | ErrorCode::InvalidAction
                | ErrorCode::NotReady
                | ErrorCode::Busy
                | ErrorCode::Unsupported
        )
    }
}

/// What went wrong, in which category.
#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    /// An env or a peer reported a failure with a wire code (the common case).
    Env,
    /// The network: connect refused, the peer went away, an I/O failure.
    Connection,
    /// Bytes that are not a valid frame or message.
    Protocol,
    /// A bad argument from the caller (an invalid address, a space that cannot exist...).
    InvalidArgument,
    /// The peer refused the handshake (generation/edition/service mismatch, or busy).
    Handshake,
    /// The endpoint refused this client's token (or its lack of one) at the handshake.
    Authentication,
}

/// The crate's error: a code, a message and whether the session survives.
///
/// An [`Env`](crate::Env) returns [`Error::environment_recoverable`] to fail one
/// request and keep the client's session; any other error it returns ends the
/// session and the client reads `[INTERNAL] {op} failed: {message}` (RENV-6).
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    kind: ErrorKind,
    code: ErrorCode,
    message: String,
    recoverable: bool,
    op: String,
}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A failure that ends the session (an env returning it: `[INTERNAL] {op} failed: {message}`).
    pub fn environment(message: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::Internal, message, false)
    }

    /// A failure of this one request; the client's session stays usable (RENV-6).
    pub fn environment_recoverable(message: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::Internal, message, true)
    }

    /// An error with an explicit wire code and recoverability.
    pub fn with_code(code: ErrorCode, message: impl Into<String>, recoverable: bool) -> Error {
        Error {
            kind: ErrorKind::Env,
            code,
            message: message.into(),
            recoverable,
            op: String::new(),
        }
    }

    /// An invalid action (recoverable).
    pub fn invalid_action(message: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::InvalidAction, message, true)
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Protocol,
            code: ErrorCode::Protocol,
            message: message.into(),
            recoverable: false,
            op: String::new(),
        }
    }

    pub(crate) fn connection(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Connection,
            code: ErrorCode::Closed,
            message: message.into(),
            recoverable: false,
            op: String::new(),
        }
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::InvalidArgument,
            code: ErrorCode::Unspecified,
            message: message.into(),
            recoverable: true,
            op: String::new(),
        }
    }

    pub(crate) fn handshake(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Handshake,
            code,
            message: message.into(),
            recoverable: false,
            op: String::new(),
        }
    }

    pub(crate) fn authentication(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Authentication,
            code: ErrorCode::Unspecified,
            message: message.into(),
            recoverable: false,
            op: String::new(),
        }
    }

    pub(crate) fn with_op(mut self, op: &str) -> Error {
        self.op = op.to_owned();
        self
    }

    /// Whether the session survives this error (the wire's `recoverable` flag).
    pub fn is_recoverable(&self) -> bool {
        self.recoverable
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The message without the `[CODE]` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The operation that failed (`reset`, `step`, `render`, `close`), when known.
    pub fn op(&self) -> &str {
        &self.op
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Env | ErrorKind::Protocol => {
                write!(f, "[{}] {}", self.code.label(), self.message)
            }
            ErrorKind::Connection => write!(f, "connection error: {}", self.message),
            ErrorKind::InvalidArgument => f.write_str(&self.message),
            ErrorKind::Handshake => write!(f, "handshake refused: {}", self.message),
            ErrorKind::Authentication => write!(f, "authentication failed: {}", self.message),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::connection(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recoverable_and_fatal_env_errors() {
        let r = Error::environment_recoverable("try again");
        assert!(r.is_recoverable());
        assert_eq!(r.to_string(), "[INTERNAL] try again");
        assert!(!Error::environment("boom").is_recoverable());
    }

    #[test]
    fn codes_round_trip_through_their_numbers() {
        for n in [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14] {
            assert_eq!(ErrorCode::from_number(n).number(), n);
        }
        assert!(ErrorCode::InvalidAction.default_recoverable());
        assert!(!ErrorCode::Internal.default_recoverable());
    }
}

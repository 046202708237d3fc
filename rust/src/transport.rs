//! Addresses (TCP and Unix sockets) and a framed connection over either.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::frame::{self, Frame, FrameLimits, PREFIX_SIZE};
use crate::wire::Message;

/// A normalized endpoint address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl Address {
    /// Whether only this host can reach the address: a unix socket, or a TCP host that is
    /// (or resolves only to) a loopback address; a name that does not resolve is not.
    pub fn is_loopback(&self) -> bool {
        match self {
            Address::Unix(_) => true,
            Address::Tcp { host, .. } => {
                let bare = host.trim_matches(|c| c == '[' || c == ']');
                if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
                    return ip.is_loopback();
                }
                match (bare, 0u16).to_socket_addrs() {
                    Ok(addrs) => {
                        let all: Vec<_> = addrs.collect();
                        !all.is_empty() && all.iter().all(|a| a.ip().is_loopback())
                    }
                    Err(_) => false,
                }
            }
        }
    }

    /// Parse an address to bind: `host:port`, `tcp://host:port`, `[::1]:port`, a bare
    /// port (binds 127.0.0.1), or `unix:///abs/path`.
    pub fn parse_bind(address: &str) -> Result<Address> {
        parse(address, true)
    }

    /// Parse an address to dial (`http://host:port` is accepted too).
    pub fn parse_connect(address: &str) -> Result<Address> {
        parse(address, false)
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp { host, port } if host.contains(':') => write!(f, "tcp://[{host}]:{port}"),
            Address::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            Address::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

fn invalid(raw: &str, why: &str) -> Error {
    Error::invalid_argument(format!("invalid address: {raw:?}{why}"))
}

fn parse(raw: &str, bind: bool) -> Result<Address> {
    let address = raw.trim();
    if address.is_empty() {
        return Err(Error::invalid_argument(
            "invalid address: the address is empty",
        ));
    }
    let rest = match address.split_once("://") {
        None => address,
        Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
            "unix" => {
                if rest.is_empty() {
                    return Err(invalid(raw, " names no socket path"));
                }
                let p = PathBuf::from(rest);
                let p = if p.is_absolute() {
                    p
                } else {
                    std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
                };
                return Ok(Address::Unix(p));
            }
            "tcp" => rest.trim_end_matches('/'),
            "http" if !bind => rest.trim_end_matches('/'),
            other => {
                return Err(invalid(
                    raw,
                    &format!(": unsupported address scheme '{other}'"),
                ))
            }
        },
    };
    let (host, port) = if let Some(r) = rest.strip_prefix('[') {
        let (h, tail) = r
            .split_once(']')
            .ok_or_else(|| invalid(raw, "; expected [ipv6]:port"))?;
        let p = tail
            .strip_prefix(':')
            .ok_or_else(|| invalid(raw, "; expected [ipv6]:port"))?;
        (h.to_owned(), p)
    } else if rest.matches(':').count() == 1 {
        let (h, p) = rest.split_once(':').unwrap_or((rest, ""));
        (h.trim().to_owned(), p)
    } else if bind && !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        (String::new(), rest)
    } else {
        return Err(invalid(
            raw,
            "; expected host:port, tcp://host:port or unix:///path",
        ));
    };
    let host = if bind && (host.is_empty() || host == "localhost") {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    if host.is_empty() {
        return Err(invalid(raw, " needs a host"));
    }
    if port.is_empty() {
        return Err(invalid(raw, " needs a port"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| invalid(raw, &format!(" has an invalid port {port:?}")))?;
    Ok(Address::Tcp { host, port })
}

/// A listening socket.
pub(crate) enum Listener {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(UnixListener, PathBuf),
}

impl Listener {
    pub(crate) fn bind(address: &Address) -> Result<Listener> {
        match address {
            Address::Tcp { host, port } => {
                let l = TcpListener::bind((host.as_str(), *port))
                    .map_err(|e| Error::invalid_argument(format!("cannot bind {address}: {e}")))?;
                Ok(Listener::Tcp(l))
            }
            #[cfg(unix)]
            Address::Unix(path) => {
                if path.exists() {
                    // a stale socket from a dead server is replaced; a live one is not
                    if UnixStream::connect(path).is_ok() {
                        return Err(Error::invalid_argument(format!(
                            "cannot bind {address}: another server is listening there"
                        )));
                    }
                    let _ = std::fs::remove_file(path);
                }
                let l = UnixListener::bind(path)
                    .map_err(|e| Error::invalid_argument(format!("cannot bind {address}: {e}")))?;
                Ok(Listener::Unix(l, path.clone()))
            }
            #[cfg(not(unix))]
            Address::Unix(_) => Err(Error::invalid_argument(
                "unix sockets are unavailable on this platform",
            )),
        }
    }

    pub(crate) fn local_address(&self) -> Address {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => Address::Tcp {
                    host: a.ip().to_string(),
                    port: a.port(),
                },
                Err(_) => Address::Tcp {
                    host: "127.0.0.1".into(),
                    port: 0,
                },
            },
            #[cfg(unix)]
            Listener::Unix(_, p) => Address::Unix(p.clone()),
        }
    }

    pub(crate) fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            #[cfg(unix)]
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A connected byte stream.
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    pub(crate) fn connect(address: &Address, timeout: Option<Duration>) -> Result<Stream> {
        match address {
            Address::Tcp { host, port } => {
                let addrs: Vec<_> = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| Error::connection(format!("cannot resolve {address}: {e}")))?
                    .collect();
                let mut last = None;
                for a in addrs {
                    let r = match timeout {
                        Some(t) => TcpStream::connect_timeout(&a, t),
                        None => TcpStream::connect(a),
                    };
                    match r {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok(Stream::Tcp(s));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Err(Error::connection(format!(
                    "cannot connect to {address}: {}",
                    last.map(|e| e.to_string()).unwrap_or_default()
                )))
            }
            #[cfg(unix)]
            Address::Unix(p) => UnixStream::connect(p)
                .map(Stream::Unix)
                .map_err(|e| Error::connection(format!("cannot connect to {address}: {e}"))),
            #[cfg(not(unix))]
            Address::Unix(_) => Err(Error::invalid_argument(
                "unix sockets are unavailable on this platform",
            )),
        }
    }

    /// `(host, "host:port")` of the peer, for the token gate's books and its log line.
    pub(crate) fn peer(&self) -> (String, String) {
        match self {
            Stream::Tcp(s) => match s.peer_addr() {
                Ok(a) => (a.ip().to_string(), a.to_string()),
                Err(_) => ("unknown".into(), "an unknown peer".into()),
            },
            #[cfg(unix)]
            Stream::Unix(_) => ("local".into(), "a local client (unix socket)".into()),
        }
    }

    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }

    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }

    pub(crate) fn shutdown(&self) {
        match self {
            Stream::Tcp(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            #[cfg(unix)]
            Stream::Unix(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            #[cfg(unix)]
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why reading a frame stopped.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// The peer closed the connection cleanly between frames.
    Closed,
    /// An I/O failure or a close mid-frame (including a read timeout).
    Io(io::Error),
    /// The bytes are not a valid frame.
    Protocol(Error),
}

/// A framed connection with a small read-ahead buffer (a whole small frame usually
/// arrives with one `read`).
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    header: Vec<u8>,
    pub(crate) limits: FrameLimits,
}

const READ_AHEAD: usize = 64 * 1024;
const LARGE_CHUNK: usize = 4 << 20;

impl Conn {
    pub(crate) fn new(stream: Stream, limits: FrameLimits) -> Conn {
        Conn {
            stream,
            buf: vec![0; READ_AHEAD],
            start: 0,
            end: 0,
            out: Vec::with_capacity(4096),
            header: Vec::with_capacity(256),
            limits,
        }
    }

    /// Fill the buffer until at least `n` unread bytes are available (n <= READ_AHEAD).
    fn fill(&mut self, n: usize) -> std::result::Result<(), RecvError> {
        if self.end - self.start >= n {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end < n {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    return Err(if self.end == 0 && n == PREFIX_SIZE {
                        RecvError::Closed
                    } else {
                        RecvError::Io(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed mid-frame",
                        ))
                    })
                }
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RecvError::Io(e)),
            }
        }
        Ok(())
    }

    /// Read one frame, validating the prefix against the limits before allocating.
    pub(crate) fn recv(&mut self) -> std::result::Result<Frame, RecvError> {
        self.fill(PREFIX_SIZE)?;
        let plan = frame::decode_prefix(
            &self.buf[self.start..self.start + PREFIX_SIZE],
            &self.limits,
        )
        .map_err(RecvError::Protocol)?;
        self.start += PREFIX_SIZE;
        let n = plan.body_len as usize;
        let body = if n <= READ_AHEAD {
            self.fill(n)?;
            let b = self.buf[self.start..self.start + n].to_vec();
            self.start += n;
            b
        } else {
            // grow with the bytes that actually arrive: a prefix that announces a big
            // body costs nothing until the peer sends it
            let mut b = Vec::with_capacity(n.min(LARGE_CHUNK));
            b.extend_from_slice(&self.buf[self.start..self.end]);
            self.start = 0;
            self.end = 0;
            while b.len() < n {
                let at = b.len();
                b.resize(at + (n - at).min(LARGE_CHUNK), 0);
                let mut filled = at;
                while filled < b.len() {
                    match self.stream.read(&mut b[filled..]) {
                        Ok(0) => {
                            return Err(RecvError::Io(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "connection closed mid-frame",
                            )))
                        }
                        Ok(k) => filled += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(RecvError::Io(e)),
                    }
                }
            }
            b
        };
        frame::split_body(&plan, body).map_err(RecvError::Protocol)
    }

    /// Whether unread bytes are buffered (a pipelined request).
    #[allow(dead_code)]
    pub(crate) fn buffered(&self) -> bool {
        self.end > self.start
    }

    /// Send one message with its segments as one write.
    pub(crate) fn send<S: AsRef<[u8]>>(
        &mut self,
        msg: &Message,
        request_id: u32,
        segments: &[S],
    ) -> io::Result<()> {
        self.header.clear();
        msg.write_header(&mut self.header);
        self.out.clear();
        frame::encode_frame(
            &mut self.out,
            msg.kind(),
            request_id,
            &self.header,
            segments,
        );
        let r = self.stream.write_all(&self.out);
        if self.out.capacity() > 1 << 20 {
            self.out = Vec::with_capacity(4096); // don't pin a big frame's buffer
        }
        if self.header.capacity() > 1 << 20 {
            self.header = Vec::with_capacity(256);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_like_the_python_side() {
        assert_eq!(
            Address::parse_bind("127.0.0.1:0").unwrap().to_string(),
            "tcp://127.0.0.1:0"
        );
        assert_eq!(
            Address::parse_bind("tcp://localhost:5")
                .unwrap()
                .to_string(),
            "tcp://127.0.0.1:5"
        );
        assert_eq!(
            Address::parse_bind("5555").unwrap().to_string(),
            "tcp://127.0.0.1:5555"
        );
        assert_eq!(
            Address::parse_connect("[::1]:7").unwrap().to_string(),
            "tcp://[::1]:7"
        );
        assert_eq!(
            Address::parse_connect("unix:///tmp/x.sock").unwrap(),
            Address::Unix("/tmp/x.sock".into())
        );
        assert_eq!(
            Address::parse_connect("http://h:1/").unwrap().to_string(),
            "tcp://h:1"
        );
        for bad in ["", "h", "h:", "h:99999", "ftp://h:1", "unix://", ":5"] {
            assert!(Address::parse_connect(bad).is_err(), "{bad}");
        }
        assert!(Address::parse_bind("http://h:1").is_err());
    }
}

//! A bare TCP upstream scripted byte by byte, for what the strict fake
//! cannot do: record requests its router would not match (`CONNECT`,
//! escaped paths), answer with exact bytes, or send a head and then go
//! silent as a broken server does. It counts the connections still open,
//! so a test sees whether the proxy let go of its sockets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone)]
pub enum Behaviour {
    /// Reads the request, writes these bytes, closes.
    Answer(Vec<u8>),
    /// Reads the request head, writes these bytes, then sends nothing more
    /// and keeps the connection until the proxy closes it.
    StallAfter(Vec<u8>),
}

pub struct RawUpstream {
    pub addr: std::net::SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    open: Arc<AtomicUsize>,
}

impl RawUpstream {
    pub async fn start(behaviour: Behaviour) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let upstream = RawUpstream {
            addr: listener.local_addr().expect("address"),
            heads: Arc::default(),
            open: Arc::default(),
        };
        let (heads, open) = (upstream.heads.clone(), upstream.open.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (heads, open, behaviour) = (heads.clone(), open.clone(), behaviour.clone());
                open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    serve(stream, &heads, behaviour).await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        upstream
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Request heads received (request line and headers), in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("lock").clone()
    }

    /// Connections the proxy has not closed yet.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

/// A canned HTTP/1.1 response with a body and its length.
pub fn response(status: &str, content_type: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

async fn serve(mut stream: TcpStream, heads: &Mutex<Vec<String>>, behaviour: Behaviour) {
    let Some((head, rest)) = read_head(&mut stream).await else {
        return;
    };
    heads.lock().expect("lock").push(head.clone());
    match behaviour {
        Behaviour::Answer(bytes) => {
            drain_body(&mut stream, &head, rest).await;
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
        Behaviour::StallAfter(bytes) => {
            let _ = stream.write_all(&bytes).await;
            // Silent from here on; returns when the proxy hangs up.
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    }
}

async fn read_head(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            return Some((head, buffer[end + 4..].to_vec()));
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads a `content-length` or chunked body, so closing does not reset a
/// connection the proxy is still writing to.
async fn drain_body(stream: &mut TcpStream, head: &str, mut seen: Vec<u8>) {
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse::<usize>().ok());
    let chunked = lower.contains("transfer-encoding: chunked");
    let mut chunk = [0u8; 8192];
    loop {
        let done = match length {
            Some(length) => seen.len() >= length,
            None if chunked => seen.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => true,
        };
        if done {
            return;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
        }
    }
}

//! Requests written by hand, for what an HTTP client library refuses to
//! send or quietly fixes: `CONNECT`, `OPTIONS *`, `..` in a path.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `head` (request line and headers, no blank line) to the proxy at
/// `address` (`http://host:port`) with `connection: close`, and returns the
/// whole response as text.
pub async fn send(address: &str, head: &str) -> RawResponse {
    send_with_body(address, head, b"").await
}

/// Like [`send`], followed by `body`, which may be shorter than the
/// `content-length` the head declares: the rest never comes.
pub async fn send_with_body(address: &str, head: &str, body: &[u8]) -> RawResponse {
    let host = address.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).await.expect("connects");
    let mut request = format!("{head}\r\nconnection: close\r\n\r\n").into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).await.expect("writes");
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes))
        .await
        .expect("the proxy answers and closes within 10 s")
        .expect("reads");
    RawResponse(String::from_utf8_lossy(&bytes).into_owned())
}

pub struct RawResponse(pub String);

impl RawResponse {
    pub fn status(&self) -> u16 {
        self.0
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {:?}", self.0))
    }

    pub fn json(&self) -> serde_json::Value {
        let (_, body) = self.0.split_once("\r\n\r\n").expect("a head and a body");
        serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body: {body:?}"))
    }
}

/// Sends `head` (with `connection: close`) and then its body one byte at
/// a time, a byte every `every`, until the proxy answers: a client that is
/// never silent long enough to trip a per-chunk timeout. Returns the
/// response and how long after the head it came.
pub async fn send_trickling(address: &str, head: &str, every: Duration) -> (RawResponse, Duration) {
    let host = address.trim_start_matches("http://");
    let stream = TcpStream::connect(host).await.expect("connects");
    let (mut reader, mut writer) = stream.into_split();
    let head = format!("{head}\r\nconnection: close\r\n\r\n");
    writer.write_all(head.as_bytes()).await.expect("writes");
    let started = std::time::Instant::now();
    let trickle = tokio::spawn(async move {
        // Write errors end the trickle: the proxy answered and closed.
        while writer.write_all(b" ").await.is_ok() {
            // Pacing, the behaviour under test: a client trickling bytes.
            tokio::time::sleep(every).await;
        }
    });
    let mut bytes = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), reader.read_to_end(&mut bytes)).await;
    let elapsed = started.elapsed();
    trickle.abort();
    assert!(read.is_ok(), "no answer within 15 s of trickling");
    (
        RawResponse(String::from_utf8_lossy(&bytes).into_owned()),
        elapsed,
    )
}

/// Opens a connection to `address` and sends `head` (no blank line added)
/// and the first `sent` bytes of a body: a request that is still arriving
/// for as long as the returned stream is held.
pub async fn start_request(address: &str, head: &str, sent: &[u8]) -> TcpStream {
    let host = address.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).await.expect("connects");
    let mut request = format!("{head}\r\n\r\n").into_bytes();
    request.extend_from_slice(sent);
    stream.write_all(&request).await.expect("writes");
    stream
}

impl RawResponse {
    /// The value of header `name` (lowercase), if the response has it.
    pub fn header(&self, name: &str) -> Option<String> {
        let (head, _) = self.0.split_once("\r\n\r\n")?;
        head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    }
}

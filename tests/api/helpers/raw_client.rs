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

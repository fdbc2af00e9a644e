//! Experiment: plain-HTTP/1 upstream connections driven by the task that
//! sends the request (and then by the response body's poller), instead of
//! a connection task of their own.

use bytes::Bytes;
use futures_util::Stream;
use http::{HeaderMap, HeaderValue, Method};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::net::TcpStream;

type Conn = Connection<TokioIo<TcpStream>, reqwest::Body>;

struct Idle {
    sender: SendRequest<reqwest::Body>,
    conn: Pin<Box<Conn>>,
}

#[derive(Clone, Default)]
pub struct LocalPool {
    idle: Arc<Mutex<HashMap<String, Vec<Idle>>>>,
}

impl LocalPool {
    fn take(&self, key: &str) -> Option<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(mut one) = list.pop() {
            let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
            if one.conn.as_mut().poll(&mut cx).is_pending() && one.sender.is_ready() {
                return Some(one);
            }
        }
        None
    }

    fn put(&self, key: String, one: Idle) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.entry(key).or_default().push(one);
    }

    pub async fn send(
        &self,
        method: Method,
        url: &reqwest::Url,
        mut headers: HeaderMap,
        body: reqwest::Body,
    ) -> Result<reqwest::Response, Box<dyn std::error::Error + Send + Sync>> {
        let host = url.host_str().ok_or("no host")?;
        let port = url.port_or_known_default().ok_or("no port")?;
        let key = format!("{host}:{port}");
        let mut one = match self.take(&key) {
            Some(one) => one,
            None => {
                let stream = TcpStream::connect(&key).await?;
                stream.set_nodelay(true)?;
                let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
                Idle {
                    sender,
                    conn: Box::pin(conn),
                }
            }
        };
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        };
        headers.insert(http::header::HOST, HeaderValue::from_str(&key)?);
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(body)?;
        *request.headers_mut() = headers;
        let mut response = std::pin::pin!(one.sender.send_request(request));
        let mut conn_done = false;
        let response = std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = response.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            if !conn_done && one.conn.as_mut().poll(cx).is_ready() {
                conn_done = true;
                return response.as_mut().poll(cx);
            }
            Poll::Pending
        })
        .await?;
        let (parts, body) = response.into_parts();
        let driven = Driven {
            body,
            idle: (!conn_done).then_some(one),
            pool: self.clone(),
            key,
        };
        Ok(reqwest::Response::from(http::Response::from_parts(
            parts,
            reqwest::Body::wrap_stream(driven),
        )))
    }
}

struct Driven {
    body: Incoming,
    idle: Option<Idle>,
    pool: LocalPool,
    key: String,
}

impl Driven {
    /// The response is read whole: the connection goes back to the pool.
    fn release(&mut self, cx: &mut Context<'_>) {
        if let Some(mut one) = self.idle.take() {
            if one.conn.as_mut().poll(cx).is_pending() {
                self.pool.put(std::mem::take(&mut self.key), one);
            }
        }
    }
}

impl Stream for Driven {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        use hyper::body::Body as _;
        let this = self.get_mut();
        loop {
            if let Some(one) = this.idle.as_mut() {
                if one.conn.as_mut().poll(cx).is_ready() {
                    this.idle = None;
                }
            }
            match std::task::ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if this.body.is_end_stream() {
                            this.release(cx);
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.release(cx);
                    return Poll::Ready(None);
                }
            }
        }
    }
}

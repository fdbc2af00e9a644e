//! The floor of Condenser's HTTP stack, for `bench/hotpath.sh`'s `floor`
//! target: hyper's HTTP/1 server handing each request to hyper-util's
//! pooled client (the one reqwest wraps), with nothing between them.
//!
//! It serves connections as Condenser does (`src/threads.rs`): each on one
//! thread with a single-threaded runtime of its own and an upstream pool
//! per thread. Like Condenser's chat path it reads a request's body whole
//! before forwarding it, then streams the answer back. No router, no tower
//! layers, no request id or span, no reqwest, no parsing: what is left is
//! the cost a proxy built on this stack cannot avoid, to read beside
//! nginx's hop and Condenser's relayed route (bench/README.md, "The floor").
//!
//! `FLOOR_LAYERS` adds Condenser's layers back one at a time, to price
//! each (a comma-separated list):
//!
//! - `auto`: hyper-util's HTTP/1-or-2 server with upgrades and a header
//!   timer, as `src/http/serve.rs` builds it;
//! - `axum`: an axum `Router` in front of the handler;
//! - `tower`: the layers of `src/app.rs` on that router (a request id, its
//!   info-level span, the body read timeout); implies `axum`;
//! - `log`: a tracing subscriber at Condenser's default level (`info`), so
//!   the span is recorded as Condenser's is, not skipped;
//! - `reqwest`: the upstream call through reqwest, as `src/upstream/` makes it.
//!
//! `floor LISTEN UPSTREAM [THREADS]`, e.g.
//! `floor 127.0.0.1:8081 http://127.0.0.1:8080 2`.

use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, Response, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use tokio::sync::mpsc;
use tower_http::request_id::{MakeRequestUuid, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Which of Condenser's layers this run puts back (`FLOOR_LAYERS`).
#[derive(Clone, Copy, Default)]
struct Layers {
    auto: bool,
    axum: bool,
    tower: bool,
    reqwest: bool,
}

impl Layers {
    fn from_env() -> Result<(Self, bool), Error> {
        let (mut layers, mut log) = (Self::default(), false);
        for name in std::env::var("FLOOR_LAYERS").unwrap_or_default().split(',') {
            match name.trim() {
                "" => {}
                "auto" => layers.auto = true,
                "axum" => layers.axum = true,
                "tower" => (layers.axum, layers.tower) = (true, true),
                "log" => log = true,
                "reqwest" => layers.reqwest = true,
                other => return Err(format!("floor: unknown layer {other}").into()),
            }
        }
        Ok((layers, log))
    }
}

/// The upstream client of one connection thread. Not boxed: it is cloned
/// for every request, and a boxed one would allocate at each clone.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum Upstream {
    Hyper(Client<HttpConnector, Full<Bytes>>),
    Reqwest(reqwest::Client),
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: floor LISTEN UPSTREAM [THREADS]";
    let listen: SocketAddr = args.next().ok_or(usage)?.parse()?;
    let upstream: &'static str = args.next().ok_or(usage)?.leak();
    let threads = match args.next() {
        Some(count) => count.parse()?,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let (layers, log) = Layers::from_env()?;
    exit_on_sigterm()?;
    if log {
        tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_writer(std::io::stderr)
            .init();
    }
    let connection_threads = (0..threads)
        .map(|index| start_thread(index, upstream, layers))
        .collect::<Result<Vec<_>, _>>()?;
    let listener = TcpListener::bind(listen)?;
    for (count, stream) in listener.incoming().enumerate() {
        let Ok(stream) = stream else { continue };
        stream.set_nonblocking(true)?;
        connection_threads[count % threads].send(stream)?;
    }
    Ok(())
}

/// Ends the process through `exit` on SIGTERM: a build made with
/// `-Cprofile-generate` writes its counts only then (`bench/floor-pgo.sh`).
fn exit_on_sigterm() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut terminate = {
        let _entered = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?
    };
    std::thread::Builder::new()
        .name("floor-signal".into())
        .spawn(move || {
            runtime.block_on(terminate.recv());
            std::process::exit(0);
        })?;
    Ok(())
}

/// A connection thread: serves each stream it is sent to its end.
fn start_thread(
    index: usize,
    upstream: &'static str,
    layers: Layers,
) -> std::io::Result<mpsc::UnboundedSender<TcpStream>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (streams, mut accepted) = mpsc::unbounded_channel::<TcpStream>();
    std::thread::Builder::new()
        .name(format!("floor-conn-{index}"))
        .spawn(move || {
            runtime.block_on(async move {
                let client = upstream_client(layers);
                while let Some(stream) = accepted.recv().await {
                    tokio::spawn(serve(stream, client.clone(), upstream, layers));
                }
            })
        })?;
    Ok(streams)
}

fn upstream_client(layers: Layers) -> Upstream {
    if !layers.reqwest {
        return Upstream::Hyper(Client::builder(TokioExecutor::new()).build_http());
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .build()
        .expect("a reqwest client without TLS settings builds");
    Upstream::Reqwest(client)
}

async fn serve(stream: TcpStream, client: Upstream, upstream: &'static str, layers: Layers) {
    let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(stream);
    if layers.axum {
        let service = TowerToHyperService::new(router(client, upstream, layers));
        let _ = auto_builder()
            .serve_connection_with_upgrades(io, service)
            .await;
        return;
    }
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let client = client.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(request, &client, upstream).await) }
    });
    if layers.auto {
        let _ = auto_builder()
            .serve_connection_with_upgrades(io, service)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await;
    }
}

/// As `src/http/serve.rs` builds Condenser's.
fn auto_builder() -> hyper_util::server::conn::auto::Builder<TokioExecutor> {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    builder
}

fn router(client: Upstream, upstream: &'static str, layers: Layers) -> axum::Router {
    let router = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let client = client.clone();
        async move { handle(request, &client, upstream).await }
    });
    if !layers.tower {
        return router;
    }
    router.layer(
        tower::ServiceBuilder::new()
            .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
            .layer(TraceLayer::new_for_http().make_span_with(request_span))
            .layer(RequestBodyTimeoutLayer::new(Duration::from_secs(60)))
            .map_request(|request: Request<tower_http::timeout::TimeoutBody<Body>>| {
                request.map(Body::new)
            }),
    )
}

/// The span `src/app.rs` opens for every request, at the level it does.
fn request_span<B>(request: &Request<B>) -> tracing::Span {
    let request_id = request
        .extensions()
        .get::<tower_http::request_id::RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
    )
}

/// Reads the body whole and forwards the request; a failure is a 502.
async fn handle<B>(request: Request<B>, client: &Upstream, upstream: &'static str) -> Response<Body>
where
    B: hyper::body::Body,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (head, body) = request.into_parts();
    let forwarded = match body.collect().await {
        Ok(body) => {
            forward(
                head.method,
                head.uri,
                head.headers,
                body.to_bytes(),
                client,
                upstream,
            )
            .await
        }
        Err(error) => Err(error.into()),
    };
    forwarded.unwrap_or_else(|error| {
        let mut response = Response::new(Body::from(error.to_string()));
        *response.status_mut() = hyper::StatusCode::BAD_GATEWAY;
        response
    })
}

/// The request to `upstream` with the same path and headers (but
/// `Host`); the answer as it comes.
async fn forward(
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    client: &Upstream,
    upstream: &'static str,
) -> Result<Response<Body>, Error> {
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    let url = format!("{upstream}{path}");
    let headers = headers
        .into_iter()
        .filter_map(|(name, value)| Some((name?, value)));
    let headers: HeaderMap = headers
        .filter(|(name, _)| name != hyper::header::HOST)
        .collect();
    match client {
        Upstream::Hyper(client) => {
            let mut request = Request::builder().method(method).uri(url.parse::<Uri>()?);
            *request
                .headers_mut()
                .ok_or("floor: a request without headers")? = headers;
            let response = client.request(request.body(Full::new(body))?).await?;
            Ok(response.map(Body::new))
        }
        Upstream::Reqwest(client) => {
            let response = client
                .request(method, url)
                .headers(headers)
                .body(body)
                .send()
                .await?;
            Ok(Response::from(response).map(Body::new))
        }
    }
}

//! A TCP relay that shows a test the bytes flowing one way through it:
//! what a client sends (request heads) or what it receives (keep-alives).

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which way the bytes a tap shows flow.
#[derive(Clone, Copy)]
pub enum Watched {
    FromClient,
    ToClient,
}

/// Relays every connection to `target`, handing each chunk flowing the
/// `watched` way to `observe`. Returns the address to connect to.
pub async fn tap(
    target: SocketAddr,
    watched: Watched,
    observe: impl Fn(&[u8]) + Send + Sync + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = listener.local_addr().expect("address");
    let observe = Arc::new(observe);
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let observe = observe.clone();
            tokio::spawn(async move {
                let Ok(outbound) = TcpStream::connect(target).await else {
                    return;
                };
                let (client_read, client_write) = inbound.into_split();
                let (server_read, server_write) = outbound.into_split();
                match watched {
                    Watched::FromClient => {
                        tokio::spawn(copy(server_read, client_write));
                        relay_watching(client_read, server_write, &*observe).await;
                    }
                    Watched::ToClient => {
                        tokio::spawn(copy(client_read, server_write));
                        relay_watching(server_read, client_write, &*observe).await;
                    }
                }
            });
        }
    });
    address
}

async fn copy(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
) -> std::io::Result<u64> {
    tokio::io::copy(&mut from, &mut to).await
}

async fn relay_watching(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    observe: &(impl Fn(&[u8]) + ?Sized),
) {
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 || to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        observe(&buffer[..read]);
    }
}

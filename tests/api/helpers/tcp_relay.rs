//! A TCP relay in front of a real server that a test can cut and restore,
//! to take the database away from a running proxy and give it back.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct TcpRelay {
    pub addr: SocketAddr,
    target: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl TcpRelay {
    pub async fn start(target: SocketAddr) -> TcpRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let relay = TcpRelay {
            addr: listener.local_addr().expect("addr"),
            target,
            tasks: Arc::default(),
        };
        relay.serve(listener);
        relay
    }

    /// Drops every connection and refuses new ones, like a dead server.
    pub fn cut(&self) {
        for task in self.tasks.lock().expect("lock").drain(..) {
            task.abort();
        }
    }

    /// Accepts connections again on the same address.
    pub async fn restore(&self) {
        let listener = TcpListener::bind(self.addr).await.expect("rebind relay");
        self.serve(listener);
    }

    fn serve(&self, listener: TcpListener) {
        let (target, tasks) = (self.target, self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().expect("lock").push(pipe);
            }
        });
        self.tasks.lock().expect("lock").push(accept);
    }
}

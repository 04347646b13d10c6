//! One endpoint in front of a database server that an operator can replace: a TCP relay on
//! a loopback port, as a managed database's endpoint, a virtual IP or a proxy such as
//! MaxScale is. [`Endpoint::switch_to`] points it at another server and cuts every
//! connection relayed to the old one, as a failover behind such an endpoint does.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A relay from a loopback port to the server it points at.
pub struct Endpoint {
    port: u16,
    relay: Arc<Mutex<Relay>>,
    accepting: JoinHandle<()>,
}

/// The server's port and the connections relayed to it, changed together.
struct Relay {
    upstream: u16,
    relayed: Vec<JoinHandle<()>>,
}

impl Endpoint {
    /// Starts relaying a free loopback port to the server on loopback port `upstream`.
    pub async fn in_front_of(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let port = listener.local_addr().expect("the bound port").port();
        let relay = Arc::new(Mutex::new(Relay {
            upstream,
            relayed: Vec::new(),
        }));
        let accepting = tokio::spawn({
            let relay = Arc::clone(&relay);
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let mut relay = relay.lock().unwrap_or_else(PoisonError::into_inner);
                    let upstream = relay.upstream;
                    let connection = tokio::spawn(async move {
                        // A server that is down refuses: the client sees its connection end.
                        if let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    relay.relayed.retain(|connection| !connection.is_finished());
                    relay.relayed.push(connection);
                }
            }
        });
        Self {
            port,
            relay,
            accepting,
        }
    }

    /// The endpoint's port, where clients connect.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Points the endpoint at the server on loopback port `upstream`, and cuts every
    /// connection relayed so far.
    pub fn switch_to(&self, upstream: u16) {
        let mut relay = self.relay.lock().unwrap_or_else(PoisonError::into_inner);
        relay.upstream = upstream;
        for connection in relay.relayed.drain(..) {
            connection.abort();
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.accepting.abort();
        self.switch_to(0);
    }
}

//! Loopback ports where no database server answers, for the cases about a server that does
//! not answer (start-up, the CLI's commands).

/// Loopback ports where no database server answers, each as its test needs it until this
/// is dropped: one closed, one bound but never accepting (the kernel completes the
/// handshake, and nothing more comes), one that accepts and never writes.
pub struct SilentPorts {
    /// The closed port.
    pub closed: u16,
    _never_accepts: std::net::TcpListener,
    /// The port bound but never accepting.
    never_accepts: u16,
    /// The port that accepts and never writes.
    says_nothing: u16,
    holder: tokio::task::JoinHandle<()>,
}

impl SilentPorts {
    /// Binds the three ports.
    pub async fn start() -> Self {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        let never_accepts = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let says_nothing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let says_nothing_port = says_nothing.local_addr().unwrap().port();
        let holder = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = says_nothing.accept().await {
                held.push(stream);
            }
        });
        Self {
            closed: closed_port,
            never_accepts: never_accepts.local_addr().unwrap().port(),
            _never_accepts: never_accepts,
            says_nothing: says_nothing_port,
            holder,
        }
    }

    /// Each port with what it does, as an assertion's message names it.
    pub fn ports(&self) -> [(&'static str, u16); 3] {
        [
            ("a closed port", self.closed),
            ("a port that never accepts", self.never_accepts),
            ("a port that accepts and says nothing", self.says_nothing),
        ]
    }

    /// A PostgreSQL and a MySQL URL of database `app` on each port, as `user` with the
    /// password `s3cret-pw`: each with its scheme, what its port does and the port.
    pub fn urls(&self, user: &str) -> Vec<(&'static str, &'static str, u16, String)> {
        let mut urls = Vec::new();
        for (what, port) in self.ports() {
            for scheme in ["postgres", "mysql"] {
                let url = format!("{scheme}://{user}:s3cret-pw@127.0.0.1:{port}/app");
                urls.push((scheme, what, port, url));
            }
        }
        urls
    }
}

impl Drop for SilentPorts {
    fn drop(&mut self) {
        self.holder.abort();
    }
}

//! A TCP proxy on loopback in front of a PostgreSQL or MySQL server that cuts one `COMMIT`
//! out of the conversation: a network failure (a load balancer, a pooler restart, a
//! failover) between a turn's `COMMIT` and its answer, or before the `COMMIT` reaches the
//! server.
//!
//! The proxy reads each protocol's framing and nothing more: PostgreSQL's messages (a type
//! byte and a big-endian length that counts itself; the first message of a session is
//! untyped), MySQL's packets (a 3-byte little-endian length, a sequence id, the payload; a
//! command starts at sequence id 0, and `COM_QUERY` is payload byte 0x03 followed by the
//! SQL). The runtime ends a turn with a text-protocol query that ends with `COMMIT` on both
//! (MySQL's is `SET SESSION ...; COMMIT`, the session's bounds put back in the same round
//! trip).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// Where the proxy cuts a connection that sends the `COMMIT` it is armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The `COMMIT` reaches the server, which runs it to the end (its last answer is read
    /// from the server); the client's connection is then closed without that answer.
    AnswerLost,
    /// The `COMMIT` never reaches the server: the proxy closes both sides instead of
    /// passing it on, and the server rolls the transaction back when it sees the close.
    NeverSent,
    /// The `COMMIT` reaches the server, which runs it to the end ([`CommitCutter::withheld`]
    /// counts it once its answer was read); the answer is withheld, and the client's
    /// connection stays open until the server's side closes: the server went away right
    /// after it committed.
    AnswerWithheld,
}

/// The cut a proxy is armed for: which one, after how many other `COMMIT`s.
#[derive(Debug, Clone, Copy)]
struct Armed {
    cut: Cut,
    /// `COMMIT`s to let through before the one that is cut.
    passing: usize,
}

/// The protocol a proxy speaks, from its server's URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Postgres,
    MySql,
}

/// A proxy that cuts the next `COMMIT` it is armed for, and counts its cuts.
pub struct CommitCutter {
    armed: Mutex<Option<Armed>>,
    cuts: AtomicUsize,
    /// The answers withheld to their end ([`Cut::AnswerWithheld`]).
    withheld: AtomicUsize,
}

impl CommitCutter {
    /// Starts a proxy on a free loopback port in front of the server `url` names; returns
    /// the URL of the same database through the proxy (without TLS, so the proxy reads the
    /// protocol) and the cutter.
    pub async fn in_front_of(url: &str) -> (String, Arc<CommitCutter>) {
        let protocol = if url.starts_with("postgres") {
            Protocol::Postgres
        } else {
            Protocol::MySql
        };
        let (prefix, rest) = url.rsplit_once(':').expect("the URL names a port");
        let (upstream, database) = rest.split_once('/').expect("the URL names a database");
        let upstream: u16 = upstream.parse().expect("the URL's port is a number");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cutter = Arc::new(CommitCutter {
            armed: Mutex::new(None),
            cuts: AtomicUsize::new(0),
            withheld: AtomicUsize::new(0),
        });
        let shared = Arc::clone(&cutter);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                tokio::spawn(Arc::clone(&shared).relay(protocol, client, server));
            }
        });
        let plain = match protocol {
            Protocol::Postgres => "sslmode=disable",
            Protocol::MySql => "ssl-mode=DISABLED",
        };
        (format!("{prefix}:{port}/{database}?{plain}"), cutter)
    }

    /// Cuts the `COMMIT` that comes after `passing` others, from now on, on any connection.
    pub fn arm(&self, cut: Cut, passing: usize) {
        *self.armed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Armed { cut, passing });
    }

    /// How many `COMMIT`s the proxy cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }

    /// How many answers to a `COMMIT` cut with [`Cut::AnswerWithheld`] the server sent to
    /// their end: that many such `COMMIT`s ran.
    pub fn withheld(&self) -> usize {
        self.withheld.load(Ordering::SeqCst)
    }

    /// The cut to make of a `COMMIT` the client just sent, if the proxy is armed for it.
    fn cut_for_this_commit(&self) -> Option<Cut> {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        let now = armed.as_mut()?;
        if now.passing > 0 {
            now.passing -= 1;
            return None;
        }
        let cut = now.cut;
        *armed = None;
        self.cuts.fetch_add(1, Ordering::SeqCst);
        Some(cut)
    }

    /// Relays one client connection to its server connection, cutting as armed.
    async fn relay(self: Arc<Self>, protocol: Protocol, client: TcpStream, server: TcpStream) {
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let (cut_tx, cut_rx) = tokio::sync::watch::channel(None);
        let upward = self.client_to_server(protocol, client_read, server_write, cut_tx);
        let downward = self.server_to_client(protocol, server_read, client_write, cut_rx);
        tokio::join!(upward, downward);
    }

    /// Passes the client's messages on until it closes, or a `COMMIT` is cut; a cut is
    /// told to the other direction through `cut`.
    async fn client_to_server(
        &self,
        protocol: Protocol,
        mut client: OwnedReadHalf,
        mut server: OwnedWriteHalf,
        cut: tokio::sync::watch::Sender<Option<Cut>>,
    ) {
        let mut started = false;
        loop {
            let frame = match protocol {
                Protocol::Postgres => read_postgres_message(&mut client, started).await,
                Protocol::MySql => read_mysql_packet(&mut client).await,
            };
            let Ok(frame) = frame else { break };
            let commit = started && sends_commit(protocol, &frame);
            started = true;
            if let Some(made) = commit.then(|| self.cut_for_this_commit()).flatten() {
                cut.send_replace(Some(made));
                if made == Cut::NeverSent {
                    break;
                }
            }
            if server.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = server.shutdown().await;
    }

    /// Passes the server's messages on until it closes; once a `COMMIT` is cut, passes
    /// nothing more: reads the server's answer to that `COMMIT` to its end (for
    /// [`Cut::AnswerLost`]; for [`Cut::NeverSent`] the server closes instead) and closes the
    /// client's connection, or, for [`Cut::AnswerWithheld`], keeps reading until the server
    /// closes first.
    async fn server_to_client(
        &self,
        protocol: Protocol,
        mut server: OwnedReadHalf,
        mut client: OwnedWriteHalf,
        cut: tokio::sync::watch::Receiver<Option<Cut>>,
    ) {
        while let Ok(frame) = read_server_frame(protocol, &mut server).await {
            // The client sent nothing after its COMMIT: what comes once it was cut answers
            // it.
            let made = *cut.borrow();
            match made {
                Some(Cut::AnswerWithheld) => {
                    if ends_the_answer(protocol, &frame) {
                        self.withheld.fetch_add(1, Ordering::SeqCst);
                    }
                    continue;
                }
                Some(_) if ends_the_answer(protocol, &frame) => break,
                Some(_) => continue,
                None => {}
            }
            if client.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = client.shutdown().await;
    }
}

/// Reads one message of the server's (every one of them is typed).
async fn read_server_frame(
    protocol: Protocol,
    server: &mut (impl AsyncRead + Unpin),
) -> std::io::Result<Vec<u8>> {
    match protocol {
        Protocol::Postgres => read_postgres_message(server, true).await,
        Protocol::MySql => read_mysql_packet(server).await,
    }
}

/// Whether a client's message is a text-protocol query that ends with `COMMIT`.
fn sends_commit(protocol: Protocol, frame: &[u8]) -> bool {
    let sql = match protocol {
        // 'Q', the length, the SQL and its NUL.
        Protocol::Postgres if frame[0] == b'Q' => &frame[5..frame.len() - 1],
        // The packet header, then COM_QUERY (0x03) and the SQL, in a command's first packet.
        Protocol::MySql if frame.len() > 4 && frame[3] == 0 && frame[4] == 0x03 => &frame[5..],
        _ => return false,
    };
    String::from_utf8_lossy(sql)
        .trim_end_matches([';', ' ', '\n'])
        .to_ascii_uppercase()
        .ends_with("COMMIT")
}

/// Whether a server's message is the last of its answer to a query: PostgreSQL's
/// `ReadyForQuery`; MySQL's error packet, or an OK packet without "more results" (the
/// answer to the last statement of a multi-statement query).
fn ends_the_answer(protocol: Protocol, frame: &[u8]) -> bool {
    match protocol {
        Protocol::Postgres => frame[0] == b'Z',
        Protocol::MySql => match frame.get(4) {
            Some(0xff) => true,
            Some(0x00) => {
                const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
                let mut at = 5;
                // The affected rows and the last insert id, as length-encoded integers.
                for _ in 0..2 {
                    at += match frame.get(at) {
                        Some(0xfc) => 3,
                        Some(0xfd) => 4,
                        Some(0xfe) => 9,
                        _ => 1,
                    };
                }
                let status = frame
                    .get(at..at + 2)
                    .map_or(0, |bytes| u16::from_le_bytes([bytes[0], bytes[1]]));
                status & SERVER_MORE_RESULTS_EXISTS == 0
            }
            _ => false,
        },
    }
}

/// Reads one PostgreSQL message: a type byte (unless `typed` is false: a session's first
/// message) and a length-prefixed body; returns it whole.
async fn read_postgres_message(
    reader: &mut (impl AsyncRead + Unpin),
    typed: bool,
) -> std::io::Result<Vec<u8>> {
    let mut message = Vec::new();
    if typed {
        message.push(reader.read_u8().await?);
    }
    let length = reader.read_u32().await?;
    message.extend_from_slice(&length.to_be_bytes());
    let mut body = vec![0; (length as usize).saturating_sub(4)];
    reader.read_exact(&mut body).await?;
    message.extend_from_slice(&body);
    Ok(message)
}

/// Reads one MySQL packet: its 4-byte header and its payload; returns it whole.
async fn read_mysql_packet(reader: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut header = [0; 4];
    reader.read_exact(&mut header).await?;
    let length = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    let mut packet = Vec::with_capacity(4 + length);
    packet.extend_from_slice(&header);
    packet.resize(4 + length, 0);
    reader.read_exact(&mut packet[4..]).await?;
    Ok(packet)
}

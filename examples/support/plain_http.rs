//! A plain HTTP/1.0 request over a TCP stream, for the examples that call the route they
//! serve without an HTTP client's dependency.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The body of the answer to `method path` sent to `address` with `headers` (each line
/// ending in `\r\n`), which must be 200.
pub async fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("{method} {path} HTTP/1.0\r\nHost: {address}\r\n{headers}\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("the response has no body")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{method} {path} answered {head}").into());
    }
    Ok(body.to_owned())
}

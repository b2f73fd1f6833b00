//! A small HTTPS server standing in for a control-plane component's health endpoints in the
//! kubeadm-shaped static pod tests: `/livez` and `/readyz` answer 200 `ok`, `/fail` answers
//! 500, anything else 404. It reads its certificate and key from files, as kube-apiserver
//! reads them from the `hostPath` PKI directory kubeadm mounts.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use rustls::pki_types::pem::PemObject;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "HTTPS health endpoints for probe tests")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: String,
    /// Certificate chain, PEM.
    #[arg(long)]
    cert: PathBuf,
    /// Private key, PEM.
    #[arg(long)]
    key: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let certs = rustls_pemfile_certs(&read(&args.cert)?)?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&read(&args.key)?)
        .with_context(|| format!("no private key in {}", args.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let config = Arc::new(config);
    let listener =
        TcpListener::bind(&args.listen).with_context(|| format!("listening on {}", args.listen))?;
    println!("serving https on {}", listener.local_addr()?);
    for stream in listener.incoming().flatten() {
        let config = config.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve(stream, config) {
                eprintln!("connection: {e}");
            }
        });
    }
    Ok(())
}

fn rustls_pemfile_certs(
    pem: &[u8],
) -> anyhow::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    let certs =
        rustls::pki_types::CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
    anyhow::ensure!(!certs.is_empty(), "no certificate");
    Ok(certs)
}

/// One request per connection, answered and closed.
fn serve(stream: TcpStream, config: Arc<rustls::ServerConfig>) -> anyhow::Result<()> {
    let conn = rustls::ServerConnection::new(config)?;
    let mut tls = rustls::StreamOwned::new(conn, stream);
    let mut reader = BufReader::new(&mut tls);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = match path.split('?').next().unwrap_or(path) {
        "/livez" | "/readyz" | "/healthz" => ("200 OK", "ok"),
        "/fail" => ("500 Internal Server Error", "failing on purpose"),
        _ => ("404 Not Found", "not found"),
    };
    write!(
        tls,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}

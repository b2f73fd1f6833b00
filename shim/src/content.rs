//! Writing blobs into containerd's content store.
//!
//! containerd's `Content.Write` is a lock-step stream: each request (stat, write, commit) gets
//! one response. The writer checks size and digest at commit, so a blob is either whole and
//! verified or not there at all.

use std::collections::HashMap;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{
    InfoRequest, WriteAction, WriteContentRequest, WriteContentResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

/// Bytes sent per write request; large enough to keep round trips few, small enough to stay
/// well under gRPC's default 4 MiB message limit.
pub const CHUNK: usize = 1 << 20;

/// Errors from the content store.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// containerd refused or failed a call.
    #[error("content store: {op} {digest}: {status}")]
    Rpc {
        op: &'static str,
        digest: String,
        #[source]
        status: Status,
    },
    /// The write stream ended before containerd answered.
    #[error("content store: write stream for {digest} closed early")]
    StreamClosed { digest: String },
    /// More bytes were offered than the descriptor declares.
    #[error("content store: {digest} is {expected} bytes but {written} were offered")]
    TooLarge {
        digest: String,
        expected: i64,
        written: i64,
    },
}

/// Whether `digest` is already committed in the content store.
pub async fn exists(cd: &Containerd, digest: &str) -> Result<bool, ContentError> {
    match cd
        .content()
        .info(InfoRequest {
            digest: digest.to_string(),
        })
        .await
    {
        Ok(_) => Ok(true),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(status) => Err(ContentError::Rpc {
            op: "info",
            digest: digest.to_string(),
            status,
        }),
    }
}

/// An open write of one blob. Feed it with [`Writer::write`], then [`Writer::commit`].
pub struct Writer {
    tx: mpsc::Sender<WriteContentRequest>,
    rx: Streaming<WriteContentResponse>,
    reference: String,
    digest: String,
    total: i64,
    offset: i64,
    /// Bytes already in containerd from an earlier, interrupted write under the same ref.
    resume_skip: i64,
}

/// How [`Writer::open`] found the blob.
pub enum Opened {
    /// The blob is already committed; nothing to write.
    Exists,
    /// A write is open (boxed: a writer holds a stream and is much larger than `Exists`).
    Writing(Box<Writer>),
}

impl Writer {
    /// Opens a write of `total` bytes expected to hash to `digest`, under ingest ref `reference`
    /// (one ref per blob: containerd locks it so two writers never interleave).
    pub async fn open(
        cd: &Containerd,
        reference: &str,
        digest: &str,
        total: i64,
    ) -> Result<Opened, ContentError> {
        let (tx, rx) = mpsc::channel(2);
        let rpc = |status| ContentError::Rpc {
            op: "write",
            digest: digest.to_string(),
            status,
        };
        let stat = WriteContentRequest {
            action: WriteAction::Stat as i32,
            r#ref: reference.to_string(),
            total,
            expected: digest.to_string(),
            ..Default::default()
        };
        tx.send(stat)
            .await
            .map_err(|_| ContentError::StreamClosed {
                digest: digest.to_string(),
            })?;
        let mut rx = match cd.content().write(ReceiverStream::new(rx)).await {
            Ok(r) => r.into_inner(),
            Err(s) if s.code() == Code::AlreadyExists => return Ok(Opened::Exists),
            Err(s) => return Err(rpc(s)),
        };
        let first = match rx.message().await {
            Ok(Some(m)) => m,
            Ok(None) => {
                return Err(ContentError::StreamClosed {
                    digest: digest.to_string(),
                });
            }
            Err(s) if s.code() == Code::AlreadyExists => return Ok(Opened::Exists),
            Err(s) => return Err(rpc(s)),
        };
        Ok(Opened::Writing(Box::new(Writer {
            tx,
            rx,
            reference: reference.to_string(),
            digest: digest.to_string(),
            total,
            offset: first.offset,
            resume_skip: first.offset,
        })))
    }

    async fn round_trip(
        &mut self,
        req: WriteContentRequest,
    ) -> Result<WriteContentResponse, ContentError> {
        let closed = || ContentError::StreamClosed {
            digest: self.digest.clone(),
        };
        self.tx.send(req).await.map_err(|_| closed())?;
        match self.rx.message().await {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(closed()),
            Err(status) => Err(ContentError::Rpc {
                op: "write",
                digest: self.digest.clone(),
                status,
            }),
        }
    }

    /// Appends `data`. Bytes that an interrupted earlier write under the same ref already
    /// stored are skipped, so callers can always stream from the start.
    pub async fn write(&mut self, mut data: &[u8]) -> Result<(), ContentError> {
        if self.resume_skip > 0 {
            let skip = usize::try_from(self.resume_skip)
                .unwrap_or(usize::MAX)
                .min(data.len());
            data = &data[skip..];
            self.resume_skip -= skip as i64;
        }
        for chunk in data.chunks(CHUNK) {
            let end = self.offset + chunk.len() as i64;
            if end > self.total {
                return Err(ContentError::TooLarge {
                    digest: self.digest.clone(),
                    expected: self.total,
                    written: end,
                });
            }
            let req = WriteContentRequest {
                action: WriteAction::Write as i32,
                r#ref: self.reference.clone(),
                offset: self.offset,
                data: chunk.to_vec(),
                ..Default::default()
            };
            self.round_trip(req).await?;
            self.offset = end;
        }
        Ok(())
    }

    /// Commits the blob; containerd verifies size and digest and rejects a mismatch.
    pub async fn commit(mut self, labels: HashMap<String, String>) -> Result<(), ContentError> {
        let req = WriteContentRequest {
            action: WriteAction::Commit as i32,
            r#ref: self.reference.clone(),
            total: self.total,
            offset: self.offset,
            expected: self.digest.clone(),
            labels,
            ..Default::default()
        };
        match self.round_trip(req).await {
            Err(ContentError::Rpc { status, .. }) if status.code() == Code::AlreadyExists => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Writes a blob held in memory (manifests, configs, small layers), verified by containerd.
/// Each call writes under its own ingest ref, so concurrent writers of the same document
/// never wait on each other's lock: the second commit just finds the blob there.
pub async fn write_bytes(
    cd: &Containerd,
    digest: &str,
    data: &[u8],
    labels: HashMap<String, String>,
) -> Result<(), ContentError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let reference = format!("ferrolet-{digest}-{}-{n}", std::process::id());
    match Writer::open(cd, &reference, digest, data.len() as i64).await? {
        Opened::Exists => Ok(()),
        Opened::Writing(mut w) => {
            w.write(data).await?;
            w.commit(labels).await
        }
    }
}

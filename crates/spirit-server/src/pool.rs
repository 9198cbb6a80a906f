//! The query pool: searches and gets run on these threads, never on the async reactor, so a long query
//! cannot stall the accept loop, other connections or the metrics endpoint. The queue in front of the pool is
//! bounded (like Elasticsearch's search thread pool queue): when it is full the request is refused with 429
//! instead of piling up without limit.

use crate::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use crossbeam_channel::{Sender, TrySendError};
use std::panic::AssertUnwindSafe;

type Job = Box<dyn FnOnce() + Send>;

pub struct QueryPool {
    tx: Sender<Job>,
    threads: usize,
}

impl QueryPool {
    /// Starts `threads` worker threads behind a queue of `queue` waiting jobs.
    pub fn new(threads: usize, queue: usize) -> QueryPool {
        assert!(threads > 0 && queue > 0, "a query pool needs threads and a queue");
        let (tx, rx) = crossbeam_channel::bounded::<Job>(queue);
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("spirit-query-{i}"))
                .spawn(move || {
                    // Ends when the pool (the only sender) is dropped.
                    for job in rx {
                        job();
                    }
                })
                .expect("spawn query thread");
        }
        QueryPool { tx, threads }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Jobs waiting for a thread.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }

    /// Runs `f` on the pool and awaits its result. A panic in `f` becomes a 500 error (the thread lives on).
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(AssertUnwindSafe(f));
            let _ = tx.send(r);
        });
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "es_rejected_execution_exception",
                    format!("the query queue is full ({} waiting); retry later", self.tx.len()),
                ))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "node_closed_exception",
                    "shutting down",
                ))
            }
        }
        match rx.await {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => Err(panic_error(panic)),
            Err(_) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "spirit_exception",
                "query thread ended",
            )),
        }
    }
}

/// Runs blocking write work (a crash-safe write waits for its persist barrier) on tokio's blocking threads,
/// turning a panic into a 500 error.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
    match tokio::task::spawn_blocking(move || std::panic::catch_unwind(AssertUnwindSafe(f))).await {
        Ok(Ok(r)) => r,
        Ok(Err(panic)) => Err(panic_error(panic)),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "spirit_exception", e.to_string())),
    }
}

fn panic_error(panic: Box<dyn std::any::Any + Send>) -> ApiError {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "spirit_exception", format!("internal error: {msg}"))
}

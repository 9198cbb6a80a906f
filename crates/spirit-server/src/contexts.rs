//! Search contexts kept between requests — scrolls ([`crate::scroll`]) and points in time ([`crate::pit`]):
//! an id per context, a keep-alive renewed by every use, a bound on how many are open.
//!
//! A context is only ever used by one request at a time: a second request for it while one runs is turned
//! away with a 429 (clients retry those) rather than holding a query thread. Expired contexts are dropped
//! whenever the store is touched (never one in use: its use renews it). The bound is checked and a slot
//! reserved under the store's lock before a new context's first request runs, so concurrent opens cannot
//! pass it together.

use crate::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// A context, its keep-alive and expiry. The value has its own lock (held while a request uses it), the
/// times another (held for an instant), so listing and sweeping never wait for a request.
struct Entry<T> {
    value: Mutex<T>,
    times: Mutex<Times>,
    /// When it was opened (epoch milliseconds).
    created_ms: u64,
}

struct Times {
    keep_alive: Duration,
    expires: Instant,
}

/// The open contexts of one kind.
pub struct Contexts<T> {
    open: Mutex<HashMap<String, Arc<Entry<T>>>>,
    /// Contexts whose first request is running: they count against `max` already.
    opening: AtomicUsize,
    next: AtomicU64,
    hasher: std::collections::hash_map::RandomState,
    max: usize,
    /// What they are called in errors (`scroll`, `point in time`).
    what: &'static str,
    /// Elasticsearch's error type for one too many.
    too_many: &'static str,
}

/// How a request uses a context ([`Contexts::with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// For long: another request meanwhile is turned away.
    Alone,
    /// For an instant: another request waits.
    Briefly,
}

/// A slot for a context being opened (released when dropped, unless the context was inserted).
pub struct Reservation<'a>(&'a AtomicUsize);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl<T> Contexts<T> {
    pub fn new(max: usize, what: &'static str, too_many: &'static str) -> Self {
        Contexts {
            open: Mutex::new(HashMap::new()),
            opening: AtomicUsize::new(0),
            next: AtomicU64::new(1),
            hasher: Default::default(),
            max,
            what,
            too_many,
        }
    }

    /// Contexts open now (expired ones are dropped first).
    pub fn len(&self) -> usize {
        let mut open = self.open.lock();
        sweep(&mut open);
        open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A slot for one more context, or a 429 when `max` are open or opening.
    pub fn reserve(&self) -> ApiResult<Reservation<'_>> {
        let mut open = self.open.lock();
        sweep(&mut open);
        if open.len() + self.opening.load(Relaxed) >= self.max {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                self.too_many,
                format!(
                    "Trying to create too many {} contexts. Must be less than or equal to: [{}]. Free them \
                     (DELETE) or let them expire.",
                    self.what, self.max
                ),
            ));
        }
        self.opening.fetch_add(1, Relaxed);
        Ok(Reservation(&self.opening))
    }

    /// Opens `value` in the slot `reserved`, kept `keep_alive` from now; returns its id.
    pub fn insert(&self, reserved: Reservation<'_>, value: T, keep_alive: Duration) -> String {
        let n = self.next.fetch_add(1, Relaxed);
        let mut h = self.hasher.build_hasher();
        h.write_u64(n);
        // A counter (never repeats within the process) and 64 bits keyed by the process's random seed.
        let id = format!("{n:x}-{:016x}", h.finish());
        let created_ms =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let times = Mutex::new(Times { keep_alive, expires: Instant::now() + keep_alive });
        let entry = Entry { value: Mutex::new(value), times, created_ms };
        let mut open = self.open.lock();
        open.insert(id.clone(), Arc::new(entry));
        // Counted as open from here on (the map's lock is held, so no check sees it twice or not at all).
        drop(reserved);
        id
    }

    /// Runs `f` on context `id` (a 404 `missing` when unknown or expired), its keep-alive set to `keep_alive`
    /// when given, then renewed. While another request uses it, a request is turned away with a 429
    /// ([`Use::Alone`]: `f` runs long, a scroll's page) or waits ([`Use::Briefly`]: `f` holds it an instant).
    pub fn with<R>(
        &self,
        id: &str,
        keep_alive: Option<Duration>,
        missing: impl FnOnce() -> ApiError,
        how: Use,
        f: impl FnOnce(&mut T) -> ApiResult<R>,
    ) -> ApiResult<R> {
        let entry = {
            let mut open = self.open.lock();
            sweep(&mut open);
            open.get(id).cloned().ok_or_else(missing)?
        };
        let value = match how {
            Use::Briefly => Some(entry.value.lock()),
            Use::Alone => entry.value.try_lock(),
        };
        let Some(mut value) = value else {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "es_rejected_execution_exception",
                format!("{} [{id}] is in use by another request; it is used by one at a time", self.what),
            ));
        };
        if let Some(k) = keep_alive {
            entry.times.lock().keep_alive = k;
        }
        let r = f(&mut value);
        let mut times = entry.times.lock();
        times.expires = Instant::now() + times.keep_alive;
        r
    }

    /// Frees the contexts `ids` (`None`: every one); returns the ids that were open.
    pub fn remove(&self, ids: Option<&[String]>) -> Vec<String> {
        let mut open = self.open.lock();
        sweep(&mut open);
        match ids {
            None => std::mem::take(&mut *open).into_keys().collect(),
            Some(ids) => ids.iter().filter(|id| open.remove(id.as_str()).is_some()).cloned().collect(),
        }
    }

    /// Every open context's id, opening time and keep-alive (one in use too).
    pub fn list(&self) -> Vec<(String, u64, Duration)> {
        let mut open = self.open.lock();
        sweep(&mut open);
        let mut out: Vec<_> =
            open.iter().map(|(id, e)| (id.clone(), e.created_ms, e.times.lock().keep_alive)).collect();
        out.sort();
        out
    }
}

/// Drops expired contexts.
fn sweep<T>(open: &mut HashMap<String, Arc<Entry<T>>>) {
    let now = Instant::now();
    // A context in use is not expired (its use renews it).
    open.retain(|_, c| c.value.is_locked() || c.times.lock().expires > now);
}

/// A time value as Elasticsearch writes them (`1m`, `30s`, `500ms`, `2h`, `1d`, `100micros`, `10nanos`): a
/// whole number and a unit. `setting` names it in errors; a keep-alive of zero or above `max` is refused.
pub fn keep_alive(setting: &str, s: &str, max: Duration) -> ApiResult<Duration> {
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let bad = || {
        ApiError::bad_request(format!(
            "failed to parse setting [{setting}] with value [{s}] as a time value: unit is missing or unrecognized"
        ))
    };
    let n: u64 = n.parse().map_err(|_| bad())?;
    let d = match unit {
        "d" => Duration::from_secs(n.saturating_mul(86_400)),
        "h" => Duration::from_secs(n.saturating_mul(3_600)),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "micros" => Duration::from_micros(n),
        "nanos" => Duration::from_nanos(n),
        _ => return Err(bad()),
    };
    if d > max {
        return Err(ApiError::bad_request(format!(
            "Keep alive for request ({s}) is too large. It must be less than ({}h). This limit can be set by \
             changing the [search.max_keep_alive] cluster level setting.",
            max.as_secs() / 3600
        )));
    }
    if d.is_zero() {
        return Err(ApiError::bad_request(format!("[{setting}] keep alive must be above zero, got [{s}]")));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn keep_alives_parse_as_elasticsearch_time_values() {
        assert_eq!(keep_alive("scroll", "1m", DAY).unwrap(), Duration::from_secs(60));
        assert_eq!(keep_alive("scroll", "30s", DAY).unwrap(), Duration::from_secs(30));
        assert_eq!(keep_alive("scroll", "500ms", DAY).unwrap(), Duration::from_millis(500));
        assert_eq!(keep_alive("scroll", "2h", DAY).unwrap(), Duration::from_secs(7200));
        assert_eq!(keep_alive("scroll", "1d", DAY).unwrap(), DAY);
        for bad in ["60", "m", "1x", "-1m", "1.5m", ""] {
            let e = keep_alive("scroll", bad, DAY).unwrap_err().reason;
            assert!(e.contains("unit is missing or unrecognized"), "{bad}");
        }
        assert!(keep_alive("scroll", "2d", DAY).unwrap_err().reason.contains("too large"));
        assert!(keep_alive("scroll", "0s", DAY).unwrap_err().reason.contains("above zero"));
    }

    #[test]
    fn contexts_expire_are_bounded_and_used_one_request_at_a_time() {
        let c: Contexts<u32> = Contexts::new(2, "test", "too_many");
        let a = c.insert(c.reserve().unwrap(), 1, Duration::from_millis(300));
        let r = c.reserve().unwrap();
        // One open and one opening: the bound is reached.
        assert_eq!(c.reserve().err().unwrap().status, StatusCode::TOO_MANY_REQUESTS);
        drop(r);
        let b = c.insert(c.reserve().unwrap(), 2, Duration::from_secs(60));
        assert_ne!(a, b);
        let missing = || ApiError::bad_request("missing");
        assert_eq!(c.with(&b, None, missing, Use::Alone, |v| Ok(*v)).unwrap(), 2);
        // In use: a second request is turned away.
        let entry = c.open.lock().get(&b).cloned().unwrap();
        let held = entry.value.lock();
        assert_eq!(c.list().len(), 2, "a context in use is listed");
        assert_eq!(
            c.with(&b, None, missing, Use::Alone, |v| Ok(*v)).err().unwrap().status,
            StatusCode::TOO_MANY_REQUESTS
        );
        drop(held);
        std::thread::sleep(Duration::from_millis(350));
        assert!(c.with(&a, None, missing, Use::Alone, |v| Ok(*v)).is_err(), "expired");
        assert_eq!(c.len(), 1);
        assert_eq!(c.list().len(), 1);
        assert_eq!(c.remove(None), vec![b]);
        assert!(c.is_empty());
    }
}

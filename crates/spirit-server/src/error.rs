//! Errors shaped like Elasticsearch's: `{"error": {"root_cause": [..], "type": .., "reason": ..}, "status": N}`
//! with the status code and error type an Elasticsearch client expects for the same mistake, so that client
//! libraries raise their usual exception classes (`NotFoundError`, `RequestError`, ...).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to the client.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// Elasticsearch's error type (`index_not_found_exception`, `parsing_exception`, ...).
    pub kind: &'static str,
    pub reason: String,
    /// Extra fields of the error object (`index`, `resource.id`, ...).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, reason: impl Into<String>) -> ApiError {
        ApiError { status, kind, reason: reason.into(), extra: Default::default() }
    }

    /// 400 `illegal_argument_exception`.
    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "illegal_argument_exception", reason)
    }

    /// 400 `parsing_exception`: a request body or query that does not parse.
    pub fn parsing(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "parsing_exception", reason)
    }

    /// 400 for a feature of the Elasticsearch API that spirit does not implement (said plainly).
    pub fn unsupported(what: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "illegal_argument_exception",
            format!("{what} is not supported by spirit"),
        )
    }

    pub fn index_not_found(index: &str) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::NOT_FOUND,
            "index_not_found_exception",
            format!("no such index [{index}]"),
        );
        e.extra.insert("index".into(), json!(index));
        e.extra.insert("resource.type".into(), json!("index_or_alias"));
        e.extra.insert("resource.id".into(), json!(index));
        e
    }

    pub fn with(mut self, key: &str, value: serde_json::Value) -> ApiError {
        self.extra.insert(key.into(), value);
        self
    }

    /// The error object of a response (also used for the items of a bulk response).
    pub fn body(&self) -> serde_json::Value {
        let mut cause = serde_json::Map::new();
        cause.insert("type".into(), json!(self.kind));
        cause.insert("reason".into(), json!(self.reason));
        cause.extend(self.extra.clone());
        let mut err = cause.clone();
        err.insert("root_cause".into(), json!([cause]));
        serde_json::Value::Object(err)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.kind, self.status.as_u16(), self.reason)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.body(), "status": self.status.as_u16()});
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert("www-authenticate", axum::http::HeaderValue::from_static("ApiKey"));
        }
        resp
    }
}

impl From<spirit::Error> for ApiError {
    fn from(e: spirit::Error) -> ApiError {
        use spirit::Error as E;
        let reason = e.to_string();
        match e {
            E::BadDocument(_) => ApiError::new(StatusCode::BAD_REQUEST, "mapper_parsing_exception", reason),
            E::DocumentTooLarge { .. } | E::InvalidArgument(_) => ApiError::bad_request(reason),
            E::QuerySyntax(_) => ApiError::new(StatusCode::BAD_REQUEST, "query_shard_exception", reason),
            E::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "resource_not_found_exception", reason),
            E::AlreadyExists(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "resource_already_exists_exception", reason)
            }
            // A spent persistent budget or a full disk: the write is refused, everything acknowledged stays.
            E::ResourceExhausted(_) => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "resource_exhausted_exception", reason)
            }
            E::Closed => ApiError::new(StatusCode::BAD_REQUEST, "index_closed_exception", reason),
            E::VersionConflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "version_conflict_engine_exception", reason)
            }
            E::Corrupt { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt_index_exception", reason)
            }
            E::Io { .. } | E::Format(_) | E::Locked(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "spirit_exception", reason)
            }
        }
    }
}

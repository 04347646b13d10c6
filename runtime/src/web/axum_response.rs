//! [`Error`] as an axum response (feature `axum`): a handler returns
//! `Result<Json<T>, solid_objects::Error>` and each error becomes the HTTP status it means,
//! with a JSON body that says what to do and leaks nothing internal.
//!
//! | error | status | body |
//! |-------|--------|------|
//! | `Rejected` | 409 Conflict, or the variant's `#[rejection(status = ..)]` | `{"code", "message", "details"}`, the rejection itself (`details` is `null` when it has none) |
//! | `Unauthorized`, `AdministrationDenied` | 403 Forbidden | `{"code": "unauthorized", "message"}` |
//! | `InvalidActorId`, `InvalidKey`, `PayloadTooLarge`, `UnreadablePayload`, `InvalidTimeout`, `IdempotencyConflict` | 400 Bad Request | `{"code", "message"}` |
//! | `MailboxFull` | 429 Too Many Requests | `{"code": "mailbox_full", "message"}` |
//! | `MessageNotFound` | 404 Not Found | `{"code": "not_found", "message"}` |
//! | `NotDeadLetter` | 409 Conflict | `{"code": "not_dead_letter", "message"}`: only a dead letter is retried |
//! | `Destroyed` | 410 Gone | `{"code": "destroyed", "message"}` |
//! | `Paused` | 503 Service Unavailable | `{"code": "paused", "message"}`: an operator paused the actor (the message says to try later; the operator's hint goes to the log) |
//! | `StateFromNewerBuild`, `NoMigration` | 503 Service Unavailable | `{"code": "state_version", "message"}`: another build reads this actor (likewise) |
//! | `SyncTimeout`, `WaitTimeout` | 504 Gateway Timeout | `{"code": "timeout", "message"}`, with `message_id` and `request_id` when the call's message is queued and runs later |
//! | `DatabaseUnavailable` | 503 Service Unavailable, with `Retry-After: 1` | `{"code": "database_unavailable", "message", "request_id"}`: no host of the database accepted writes (a failover under way); `request_id` is `null` when nothing was written, and names the request when it may have been carried out (look it up before sending it again); the hosts go to the server's log, not the client |
//! | `Queued`, and `HandlerFailed` to be retried | 202 Accepted | `{"code": "queued", "message", "message_id", "request_id"}`: the request is in the mailbox and runs later; asking again would run it twice (why the call stopped waiting goes to the server's log, not the client) |
//! | anything else | 500 Internal Server Error | `{"code": "internal", "message": "internal error"}` |

use axum_core::response::{IntoResponse, Response};
use http::{header, StatusCode};
use serde_json::{json, Value};

use crate::error::Error;

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, body) = status_and_body(&self);
        if let Error::DatabaseUnavailable { .. } = self {
            tracing::warn!(error = %self, "a request found the database unavailable");
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let headers = [
                (header::CONTENT_TYPE, "application/json"),
                (header::RETRY_AFTER, "1"),
            ];
            return (status, headers, body).into_response();
        }
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "a request failed");
        } else if let Error::Paused { .. }
        | Error::StateFromNewerBuild { .. }
        | Error::NoMigration { .. } = self
        {
            // What an operator can do about it: the client's body says what it can.
            tracing::warn!(error = %self, "a request found its actor unavailable");
        } else if status == StatusCode::ACCEPTED {
            tracing::warn!(error = %self, "a request is queued and runs later");
        }
        let body = serde_json::to_vec(&body).unwrap_or_default();
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// A request whose message is committed and runs later: 202, naming it. Its message says
/// nothing of why the call stopped waiting (a database error, a handler's failure), which is
/// the server's to log.
fn queued(message_id: Option<i64>, request_id: &str) -> (StatusCode, Value) {
    (
        StatusCode::ACCEPTED,
        json!({
            "code": "queued",
            "message": format!(
                "the request is queued (request id {request_id}) and runs later; do not send \
                 it again, which would run it twice"
            ),
            "message_id": message_id,
            "request_id": request_id,
        }),
    )
}

/// A 503 whose cause is the operators' to mend (the log has their hint): its body says only
/// what the client can do.
fn unavailable(code: &str, message: &str) -> (StatusCode, Value) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        json!({ "code": code, "message": message }),
    )
}

/// The status an error means and the body the client sees.
pub(crate) fn status_and_body(error: &Error) -> (StatusCode, Value) {
    let brief = |status: StatusCode, code: &str| {
        (
            status,
            json!({ "code": code, "message": error.to_string() }),
        )
    };
    match error {
        Error::Rejected(rejection) => (
            rejection
                .status()
                .and_then(|status| StatusCode::from_u16(status).ok())
                .unwrap_or(StatusCode::CONFLICT),
            json!({
                "code": rejection.code(),
                "message": rejection.message(),
                "details": rejection.details(),
            }),
        ),
        Error::Unauthorized { .. } | Error::AdministrationDenied { .. } => {
            brief(StatusCode::FORBIDDEN, "unauthorized")
        }
        Error::InvalidActorId { .. } => brief(StatusCode::BAD_REQUEST, "invalid_actor_id"),
        Error::InvalidKey { .. } => brief(StatusCode::BAD_REQUEST, "invalid_key"),
        Error::PayloadTooLarge { .. } => brief(StatusCode::BAD_REQUEST, "payload_too_large"),
        Error::UnreadablePayload { .. } => brief(StatusCode::BAD_REQUEST, "unreadable_payload"),
        Error::InvalidTimeout { .. } => brief(StatusCode::BAD_REQUEST, "invalid_timeout"),
        Error::IdempotencyConflict { .. } => brief(StatusCode::BAD_REQUEST, "idempotency_conflict"),
        Error::MailboxFull { .. } => brief(StatusCode::TOO_MANY_REQUESTS, "mailbox_full"),
        Error::MessageNotFound => brief(StatusCode::NOT_FOUND, "not_found"),
        Error::NotDeadLetter { .. } => brief(StatusCode::CONFLICT, "not_dead_letter"),
        Error::Destroyed { .. } => brief(StatusCode::GONE, "destroyed"),
        Error::Paused { .. } => unavailable(
            "paused",
            "this resource is paused for maintenance; nothing was done: send the request \
             again later",
        ),
        Error::StateFromNewerBuild { .. } | Error::NoMigration { .. } => unavailable(
            "state_version",
            "this resource is unavailable while the service is upgraded; nothing was done: \
             send the request again later",
        ),
        Error::SyncTimeout {
            message_id,
            request_id: Some(request_id),
            ..
        } => (
            StatusCode::GATEWAY_TIMEOUT,
            json!({
                "code": "timeout",
                "message": error.to_string(),
                "message_id": message_id,
                "request_id": request_id.as_str(),
            }),
        ),
        Error::SyncTimeout { .. } | Error::WaitTimeout { .. } => {
            brief(StatusCode::GATEWAY_TIMEOUT, "timeout")
        }
        Error::DatabaseUnavailable { request_id, .. } => {
            let (message, request_id) = match request_id.as_deref() {
                None => (
                    "the database is unavailable (a failover may be under way); nothing was \
                     done: send the request again"
                        .to_owned(),
                    None,
                ),
                Some(request_id) => (
                    format!(
                        "the database became unavailable while the request was carried out, \
                         which may have completed (request id {request_id}); look it up before \
                         sending it again"
                    ),
                    Some(request_id.as_str()),
                ),
            };
            (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "code": "database_unavailable",
                    "message": message,
                    "request_id": request_id,
                }),
            )
        }
        Error::Queued {
            message_id,
            request_id,
            ..
        } => queued(Some(*message_id), request_id),
        // A failed attempt committed with its message, which is retried later: the request
        // is queued (its error is the server's, like any internal error).
        Error::HandlerFailed {
            retry_at: Some(_),
            request_id: Some(request_id),
            ..
        } => queued(None, request_id),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "code": "internal", "message": "internal error" }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Rejection;

    async fn respond(error: Error) -> (StatusCode, Value) {
        let response = error.into_response();
        let status = response.status();
        let mut body = response.into_body().into_data_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
            bytes.extend_from_slice(&chunk.unwrap());
        }
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn each_error_is_the_status_it_means() {
        let rejected = Rejection::checked("not_enough_seats", "Only 2 seats are left")
            .with_details(json!({ "left": 2 }));
        let (status, body) = respond(Error::Rejected(rejected)).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            body,
            json!({"code": "not_enough_seats", "message": "Only 2 seats are left", "details": {"left": 2}})
        );

        let cases = [
            (
                Error::Unauthorized {
                    actor_type: "Show",
                    actor_id: "s".into(),
                    operation: "hold".into(),
                    reason: "sign in".into(),
                },
                StatusCode::FORBIDDEN,
            ),
            (
                Error::InvalidActorId {
                    reason: "empty".into(),
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                Error::MailboxFull {
                    actor_type: "Show".into(),
                    actor_id: "s".into(),
                    limit: 10,
                },
                StatusCode::TOO_MANY_REQUESTS,
            ),
            (Error::MessageNotFound, StatusCode::NOT_FOUND),
            (
                Error::NotDeadLetter {
                    message_id: 1,
                    status: "completed",
                },
                StatusCode::CONFLICT,
            ),
            (
                Error::Destroyed {
                    actor_type: "Show".into(),
                    actor_id: "s".into(),
                },
                StatusCode::GONE,
            ),
            (
                Error::Paused {
                    actor_type: "Show".into(),
                    actor_id: "s".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                Error::StateFromNewerBuild {
                    actor_type: "Show".into(),
                    actor_id: "s".into(),
                    stored: 3,
                    current: 2,
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                Error::SyncTimeout {
                    actor_type: "Show",
                    actor_id: "s".into(),
                    operation: "hold",
                    message_id: None,
                    request_id: None,
                    waiting_on: "the actor".into(),
                    timeout: Duration::from_secs(5),
                },
                StatusCode::GATEWAY_TIMEOUT,
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(respond(error).await.0, expected);
        }
    }

    #[tokio::test]
    async fn an_unavailable_database_is_503_naming_no_host() {
        let unavailable = |request_id: Option<&str>| Error::DatabaseUnavailable {
            backend: "PostgreSQL",
            hosts: "db1.internal:5432, db2.internal:5432".into(),
            reason: "db1.internal:5432: connection refused".into(),
            waited: Duration::from_secs(3),
            request_id: request_id.map(|id| Box::new(id.to_owned())),
        };
        let response = unavailable(None).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        for (error, request_id) in [
            (unavailable(None), Value::Null),
            (unavailable(Some("0190-r")), json!("0190-r")),
        ] {
            let (status, body) = respond(error).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(body["code"], "database_unavailable");
            assert_eq!(body["request_id"], request_id);
            assert!(!body.to_string().contains("internal"), "{body}");
        }
    }

    #[tokio::test]
    async fn a_queued_call_is_accepted_and_names_its_message() {
        let queued = Error::Queued {
            actor_type: "Show",
            actor_id: "s".into(),
            operation: "hold",
            message_id: 7,
            request_id: "r-7".into(),
            reason: Box::new(Error::Paused {
                actor_type: "Show".into(),
                actor_id: "s".into(),
            }),
        };
        let (status, body) = respond(queued).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(body["code"], "queued");
        assert_eq!(body["message_id"], 7);
        assert_eq!(body["request_id"], "r-7");
    }

    #[tokio::test]
    async fn a_rejection_without_details_still_has_the_key() {
        let rejected = Rejection::checked("room_not_found", "No room 12");
        let (_, body) = respond(Error::Rejected(rejected)).await;
        assert_eq!(
            body,
            json!({"code": "room_not_found", "message": "No room 12", "details": null})
        );
    }

    #[tokio::test]
    async fn an_internal_error_leaks_nothing() {
        let error = Error::Config("the password is hunter2".into());
        let (status, body) = respond(error).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            json!({"code": "internal", "message": "internal error"})
        );
    }

    #[tokio::test]
    async fn a_paused_actor_tells_the_client_to_come_back_and_names_no_operator_tooling() {
        let error = Error::Paused {
            actor_type: "Order".into(),
            actor_id: "o-1".into(),
        };
        let (status, body) = respond(error).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["code"], "paused");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("again later"), "{message}");
        for operators in ["Admin", "resume", "solid-objects", "o-1"] {
            assert!(!message.contains(operators), "{message}");
        }
    }
}

//! A [`Watch`] as a server-sent events response (feature `axum`): a page follows an actor's
//! committed states with `new EventSource(url)`.
//!
//! | item | event | data |
//! |------|-------|------|
//! | [`Watched::State`] | `state` (its `id` the revision) | `{"incarnation", "revision", "value"}` |
//! | [`Watched::Destroyed`] | `destroyed`, then the stream ends | `{"incarnation"}` |
//! | an error | `error`, and the watch goes on | `{"code", "message"}`, as the error's HTTP response says it |

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Serialize;
use serde_json::json;

use crate::client::watch::{Watch, Watched};
use crate::error::{Error, Result};

impl<T: Serialize + Send + 'static> Watch<T> {
    /// The watch as server-sent events, for an axum handler to return. Waits for the first
    /// item: a watch that fails at once (the policy denies it, say) is that error instead,
    /// which the handler returns as its HTTP status (403 for a denial). Comments keep the
    /// connection alive while no state is committed.
    ///
    /// ```no_run
    /// # use solid_objects::prelude::*;
    /// # #[actor]
    /// # #[derive(Default)]
    /// # pub struct Show { capacity: u32, held: u32 }
    /// # #[actor]
    /// # impl Show {}
    /// use axum::extract::Path;
    /// use axum::response::IntoResponse;
    ///
    /// /// `GET /shows/{id}/seats`: the seats left, each time they change.
    /// async fn seats(Path(id): Path<String>) -> Result<impl IntoResponse, Error> {
    ///     Show::reference(id)
    ///         .watch_with(|show| show.capacity - show.held)
    ///         .into_sse()
    ///         .await
    /// }
    /// ```
    pub async fn into_sse(
        mut self,
    ) -> Result<Sse<KeepAliveStream<impl Stream<Item = Result<Event, Infallible>> + Send>>> {
        let first = match self.next().await {
            Some(Ok(first)) => first,
            Some(Err(error)) => return Err(error),
            None => return Err(Error::Closed),
        };
        let events = stream::once(async move { Ok(first) })
            .chain(self)
            .map(|item| Ok(event(item)));
        Ok(Sse::new(events).keep_alive(KeepAlive::default()))
    }
}

/// The event an item of a watch is.
fn event<T: Serialize>(item: Result<Watched<T>>) -> Event {
    let (name, data) = match item {
        Ok(Watched::State {
            value,
            incarnation,
            revision,
        }) => match serde_json::to_string(&json!({
            "incarnation": incarnation,
            "revision": revision,
            "value": value,
        })) {
            Ok(data) => {
                return Event::default()
                    .event("state")
                    .id(revision.to_string())
                    .data(data)
            }
            Err(source) => (
                "error",
                error_body(&Error::Encode {
                    what: "watched value",
                    source,
                }),
            ),
        },
        Ok(Watched::Destroyed { incarnation }) => (
            "destroyed",
            json!({ "incarnation": incarnation }).to_string(),
        ),
        Err(error) => ("error", error_body(&error)),
    };
    Event::default().event(name).data(data)
}

/// What a client sees of an error: the body of its HTTP response.
fn error_body(error: &Error) -> String {
    let (status, body) = crate::web::axum_response::status_and_body(error);
    if status == http::StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(%error, "a watch failed to read a state");
    }
    body.to_string()
}

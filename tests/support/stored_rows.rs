//! Rows written straight into the harness's database, as another build or another program
//! writes them: messages the runtime then finds ready in a mailbox.

use super::{execute, Harness};

/// The `VALUES` tuple of a ready message, never attempted and due at once, for
/// [`insert_ready_messages`]: `operation` of actor `actor_type`/`actor_id` with `arguments`
/// (JSON text), under `request_id`.
pub fn ready_message(
    actor_type: &str,
    actor_id: &str,
    operation: &str,
    arguments: &str,
    request_id: &str,
) -> String {
    let quoted = |text: &str| format!("'{}'", text.replace('\'', "''"));
    format!(
        "({}, {}, {}, {}, {}, 'ready', 0, 0)",
        quoted(actor_type),
        quoted(actor_id),
        quoted(operation),
        quoted(arguments),
        quoted(request_id)
    )
}

/// Inserts `messages` (tuples of [`ready_message`]) in one statement.
pub async fn insert_ready_messages(harness: &Harness, messages: &[String]) {
    let insert = format!(
        "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
             status, available_at, created_at)
         VALUES {}",
        messages.join(", ")
    );
    execute(harness, &insert).await;
}

/// Inserts the one ready message [`ready_message`] describes.
pub async fn insert_ready_message(
    harness: &Harness,
    actor_type: &str,
    actor_id: &str,
    operation: &str,
    arguments: &str,
    request_id: &str,
) {
    let message = ready_message(actor_type, actor_id, operation, arguments, request_id);
    insert_ready_messages(harness, &[message]).await;
}

//! `dead-letters`: lists dead letters, or retries one, or redrives every match.

use serde_json::json;
use solid_objects::admin::{Admin, DeadLetterFilter};
use solid_objects::Error;

use crate::args::{DeadLetterAction, DeadLetterFilterArgs, DeadLettersArgs};
use crate::out::{arguments, escaped, time, Out};
use crate::table::Table;
use crate::{complain, Exit};

/// Lists, retries or redrives dead letters, as `args` say.
pub(crate) async fn dead_letters(
    admin: &Admin,
    args: DeadLettersArgs,
    out: &mut Out,
) -> Result<Exit, Error> {
    match args.action {
        None => {
            let letters = admin
                .dead_letters(&dead_letter_filter(&args.filter))
                .await?;
            out.listing(&letters, "no dead letters", || {
                let header = [
                    "ID",
                    "TYPE",
                    "ACTOR",
                    "OPERATION",
                    "ATTEMPTS",
                    "FAILED AT",
                    "ERROR",
                    "ARGUMENTS",
                ];
                Table::of(&header, &letters, |letter| {
                    vec![
                        letter.message_id.to_string(),
                        letter.actor_type.clone(),
                        letter.actor_id.clone(),
                        letter.operation.clone(),
                        letter.attempts.to_string(),
                        time(letter.failed_at),
                        escaped(&letter.error),
                        arguments(&letter.arguments),
                    ]
                })
            });
        }
        Some(DeadLetterAction::Retry { message_id }) => {
            let retry = match admin.retry_dead_letter(message_id).await {
                Err(Error::MessageNotFound) => {
                    complain(format_args!("no message {message_id}"));
                    return Ok(Exit::NotFound);
                }
                retried => retried?.id(),
            };
            out.result(
                &json!({ "message_id": message_id, "retried_as": retry }),
                || format!("message {message_id} enqueued again as message {retry}"),
            );
        }
        Some(DeadLetterAction::Redrive(filter)) => {
            let redriven = admin.redrive(&dead_letter_filter(&filter)).await?;
            out.result(&redriven, || {
                format!("{} dead letters enqueued again", redriven.retried)
            });
        }
    }
    Ok(Exit::Done)
}

/// The filter the arguments `--actor-type`, `--operation`, `--error`, `--since`, `--until`
/// and `--limit` make.
fn dead_letter_filter(args: &DeadLetterFilterArgs) -> DeadLetterFilter {
    let mut filter = DeadLetterFilter::new().limit(args.limit);
    if let Some(actor_type) = &args.actor_type {
        filter = filter.actor_type(actor_type);
    }
    if let Some(operation) = &args.operation {
        filter = filter.operation(operation);
    }
    if let Some(error) = &args.error {
        filter = filter.error_contains(error);
    }
    filter.since = args.since;
    filter.until = args.until;
    filter
}

//! The dashboard's HTML, rendered with maud (every value escaped): a layout and one
//! function per page.

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::charts;
use crate::admin::{
    Activity, ActorActivity, ActorDetails, DeadLetterSummary, EffectSummary, MessageSummary,
    Overview, Redriven, ReminderSummary,
};

const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 2em 2em; color: #1d2330; }
nav { padding: .8em 0; border-bottom: 1px solid #ccd; margin-bottom: 1em; }
nav a { margin-right: 1.2em; }
table { border-collapse: collapse; margin: .4em 0 1.4em; }
th, td { text-align: left; padding: .25em .8em .25em 0; border-bottom: 1px solid #e4e6ee; vertical-align: top; }
th { font-weight: 600; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.status-dead, .status-rejected { color: #b3261e; }
.status-completed { color: #1e7b34; }
pre { background: #f4f5f9; padding: .8em; overflow: auto; max-height: 24em; }
form.inline { display: inline; }
button { cursor: pointer; }
.notice { background: #fff4d6; padding: .5em .8em; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(240px, 1fr)); gap: 1em; }
.card { border: 1px solid #e4e6ee; border-radius: 6px; padding: 0 1em; }
h1 { margin: .2em 0 .6em; }
h2 { font-size: 1.1em; }
h3 { font-size: 1em; margin: .8em 0 .2em; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 0 1.5em; }
svg.chart { max-width: 100%; height: auto; }
code.arguments { display: block; max-width: 40em; max-height: 12em; overflow: auto; white-space: pre-wrap; word-break: break-all; }
.windows a, .windows strong { margin-right: .8em; }
";

/// A part of a page the policy may withhold: its content, or the action it refused.
pub(super) type Part<T> = Result<T, &'static str>;

/// A part of a page from what the administration API answered: withheld when the policy
/// refused its action (the rest of the page still shows), an error otherwise.
pub(super) fn part<T>(answered: crate::Result<T>) -> crate::Result<Part<T>> {
    match answered {
        Ok(content) => Ok(Ok(content)),
        Err(crate::Error::AdministrationDenied { action, .. }) => Ok(Err(action)),
        Err(error) => Err(error),
    }
}

/// A part of a page, or the notice that says the policy withheld it.
fn shown<T>(part: &Part<T>, show: impl FnOnce(&T) -> Markup) -> Markup {
    match part {
        Ok(content) => show(content),
        Err(action) => html! {
            p.notice.withheld {
                "Withheld: the administration policy does not allow " code { (action) } " here."
            }
        },
    }
}

/// The page around every body: title, style sheet and navigation.
fn layout(base: &str, title: &str, refresh: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if refresh {
                    meta http-equiv="refresh" content="2";
                }
                title { (title) " · solid-objects" }
                style { (STYLE) }
            }
            body {
                nav {
                    a href=(overview_link(base)) { "Overview" }
                    a href={ (base) "/dead-letters" } { "Dead letters" }
                }
                h1 { (title) }
                (body)
            }
        }
    }
}

/// The link to the overview: the mount point itself (`/ops`, not `/ops/`, which a router
/// nested at `/ops` does not answer), or `/` at the root.
fn overview_link(base: &str) -> &str {
    if base.is_empty() {
        "/"
    } else {
        base
    }
}

/// What a link's path segment or query value encodes: all but letters, digits, `-` and `_`
/// (so `seat_inventory` reads as itself in the address bar; `.` and `~` stay encoded, see
/// [`id_segment`]).
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The link to an actor's page.
pub(super) fn actor_link(base: &str, actor_type: &str, actor_id: &str) -> String {
    format!(
        "{base}/actors/{}/{}",
        utf8_percent_encode(actor_type, ENCODED),
        utf8_percent_encode(&id_segment(actor_id), ENCODED)
    )
}

/// Whether a path segment is `.` or `..` behind any number of `~`.
fn is_dots_behind_tildes(segment: &str) -> bool {
    matches!(segment.trim_start_matches('~'), "." | "..")
}

/// An actor id as its path segment: browsers resolve a `.` or `..` segment away, written
/// out or percent-encoded, so such an id (and one that is already `~`s before `.` or `..`)
/// gets one more `~` in front; [`id_from_segment`] takes it off.
fn id_segment(actor_id: &str) -> std::borrow::Cow<'_, str> {
    if is_dots_behind_tildes(actor_id) {
        format!("~{actor_id}").into()
    } else {
        actor_id.into()
    }
}

/// The actor id a path segment stands for (see [`id_segment`]).
pub(super) fn id_from_segment(segment: String) -> String {
    if segment.starts_with('~') && is_dots_behind_tildes(&segment) {
        segment[1..].to_owned()
    } else {
        segment
    }
}

fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn maybe_time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), time)
}

/// How long ago `then` was, in words a person reads at a glance.
fn ago(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let seconds = (now - then).num_seconds().max(0);
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min", seconds / 60),
        3600..86_400 => format!("{} h", seconds / 3600),
        _ => format!("{} d", seconds / 86_400),
    }
}

fn counts(rows: &[(String, i64)]) -> Markup {
    html! {
        table {
            @for (status, count) in rows {
                tr {
                    td class={ "status-" (status) } { (status) }
                    td class="num" { (count) }
                }
            }
            @if rows.is_empty() {
                tr { td { "none" } }
            }
        }
    }
}

fn retry_button(base: &str, message_id: i64) -> Markup {
    html! {
        form.inline method="post" action={ (base) "/dead-letters/" (message_id) "/retry" } {
            button type="submit" { "Retry" }
        }
    }
}

fn dead_letter_rows(base: &str, letters: &[DeadLetterSummary]) -> Markup {
    html! {
        table {
            tr {
                th { "message" } th { "actor" } th { "operation" } th { "attempts" }
                th { "error" } th { "arguments" } th { "failed at" } th {}
            }
            @for letter in letters {
                tr {
                    td { a href={ (base) "/messages/" (letter.message_id) } { "#" (letter.message_id) } }
                    td {
                        a href=(actor_link(base, &letter.actor_type, &letter.actor_id)) {
                            (letter.actor_type) " " (letter.actor_id)
                        }
                    }
                    td { (letter.operation) }
                    td class="num" { (letter.attempts) }
                    td { (letter.error) }
                    td { code.arguments { (letter.arguments) } }
                    td { (maybe_time(letter.failed_at)) }
                    td {
                        @match letter.retried_as {
                            Some(retry) => a href={ (base) "/messages/" (retry) } { "retried as #" (retry) },
                            None => (retry_button(base, letter.message_id)),
                        }
                    }
                }
            }
        }
        @if letters.is_empty() {
            p { "No dead letters." }
        }
    }
}

/// An actor's effects, with what each was asked to do.
fn effect_rows(effects: &[EffectSummary]) -> Markup {
    html! {
        table {
            tr {
                th { "effect" } th { "name" } th { "status" } th { "attempts" } th { "last error" }
                th { "arguments" }
            }
            @for effect in effects {
                tr {
                    td { (effect.id) }
                    td { (effect.name) }
                    td class={ "status-" (effect.status) } { (effect.status) }
                    td class="num" { (effect.attempts) }
                    td { (effect.last_error.as_deref().unwrap_or("-")) }
                    td { code.arguments { (effect.arguments) } }
                }
            }
        }
    }
}

/// The first page: the charts, counts, actor types, busiest mailboxes, the last hour, dead
/// letters.
pub(super) fn overview(
    base: &str,
    overview: &Overview,
    activity: &Part<Activity>,
    dead: &Part<Vec<DeadLetterSummary>>,
) -> Markup {
    let status = &overview.status;
    let body = html! {
        (shown(activity, |activity| charts::overview(overview_link(base), activity)))
        div.cards {
            section.card {
                h2 { "Messages waiting, and dead letters" }
                (counts(&status.messages))
                p {
                    "Oldest due and waiting: "
                    @match status.oldest_due_message_at {
                        Some(at) => { "enqueued " (ago(overview.now, at)) " ago" },
                        None => "none",
                    }
                }
            }
            section.card {
                h2 { "Finished in the last hour" }
                (counts(&overview.finished_last_hour))
            }
            section.card {
                h2 { "Effects pending, and dead" }
                (counts(&status.effects))
            }
            section.card {
                h2 { "Reminders" }
                p {
                    (status.reminders) " scheduled, " (status.reminders_due) " due; "
                    @match status.oldest_due_reminder_at {
                        Some(at) => { "the most overdue is " (ago(overview.now, at)) " late" },
                        None => "none late",
                    }
                    "."
                }
                p { (status.paused_actors) " actors paused." }
            }
        }
        h2 { "Newest dead letters" }
        (shown(dead, |dead| dead_letter_rows(base, dead)))
        div.cards {
            section {
                h2 { "Actor types" }
                table {
                    tr { th { "type" } th { "actors" } th { "paused" } th { "ready" } th { "dead letters" } }
                    @for kind in &overview.actor_types {
                        tr {
                            td { (kind.actor_type) }
                            td class="num" { (kind.actors) }
                            td class="num" { (kind.paused) }
                            td class="num" { (kind.ready_messages) }
                            td class="num" {
                                a href={ (base) "/dead-letters?actor_type=" (utf8_percent_encode(&kind.actor_type, ENCODED)) } {
                                    (kind.dead_letters)
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Busiest mailboxes" }
                table {
                    tr { th { "actor" } th { "ready messages" } }
                    @for mailbox in &overview.busiest {
                        tr {
                            td {
                                a href=(actor_link(base, &mailbox.actor_type, &mailbox.actor_id)) {
                                    (mailbox.actor_type) " " (mailbox.actor_id)
                                }
                            }
                            td class="num" { (mailbox.ready) }
                        }
                    }
                }
                @if overview.busiest.is_empty() {
                    p { "Every mailbox is empty." }
                }
            }
        }
    };
    layout(base, "Overview", false, body)
}

fn reminder_rows(reminders: &[ReminderSummary]) -> Markup {
    html! {
        table {
            tr { th { "name" } th { "key" } th { "due" } th { "every" } }
            @for reminder in reminders {
                tr {
                    td { (reminder.name) }
                    td { (reminder.key) }
                    td { (time(reminder.due_at)) }
                    td {
                        @match reminder.every_ms {
                            Some(every) => { (every / 1000) " s" },
                            None => "once",
                        }
                    }
                }
            }
        }
    }
}

fn message_rows(base: &str, messages: &[MessageSummary]) -> Markup {
    html! {
        table {
            tr { th { "message" } th { "operation" } th { "status" } th { "attempts" } th { "enqueued" } th { "finished" } }
            @for message in messages {
                tr {
                    td { a href={ (base) "/messages/" (message.message_id) } { "#" (message.message_id) } }
                    td { (message.operation) }
                    td class={ "status-" (message.status) } { (message.status) }
                    td class="num" { (message.attempts) }
                    td { (time(message.enqueued_at)) }
                    td { (maybe_time(message.finished_at)) }
                }
            }
        }
    }
}

/// One actor: its row, pause or resume, its turns over a window, state, head, reminders,
/// effects, recent messages.
pub(super) fn actor(base: &str, details: &ActorDetails, turns: &Part<ActorActivity>) -> Markup {
    let summary = &details.summary;
    let link = actor_link(base, &summary.actor_type, &summary.actor_id);
    let title = format!("{} {}", summary.actor_type, summary.actor_id);
    let state = details
        .state
        .as_ref()
        .map(|state| serde_json::to_string_pretty(state).unwrap_or_default());
    let body = html! {
        table {
            tr { th { "revision" } td { (summary.revision) } }
            tr { th { "incarnation" } td { (summary.incarnation) } }
            tr { th { "state version" } td { (summary.state_version) } }
            tr { th { "ready messages" } td { (summary.mailbox_depth) } }
            tr { th { "last activity" } td { (maybe_time(summary.last_activity)) } }
            tr {
                th { "paused" }
                td {
                    @match summary.paused_at {
                        Some(at) => {
                            "since " (time(at)) " "
                            form.inline method="post" action={ (link) "/resume" } {
                                button type="submit" { "Resume" }
                            }
                        },
                        None => {
                            "no "
                            form.inline method="post" action={ (link) "/pause" } {
                                button type="submit" { "Pause" }
                            }
                        },
                    }
                }
            }
        }
        (shown(turns, |turns| charts::actor(&link, &title, turns)))
        h2 { "State" }
        @match state {
            Some(state) => pre { (state) },
            None => p { "No state yet." },
        }
        h2 { "Head of the mailbox" }
        @match &details.head {
            Some(head) => table {
                tr { th { "message" } td { a href={ (base) "/messages/" (head.message_id) } { "#" (head.message_id) } } }
                tr { th { "operation" } td { (head.operation) } }
                tr { th { "attempts" } td { (head.attempts) } }
                tr { th { "last error" } td { (head.last_error.as_deref().unwrap_or("-")) } }
                tr { th { "next attempt" } td { (time(head.next_attempt_at)) } }
                tr { th { "enqueued" } td { (time(head.enqueued_at)) } }
            },
            None => p { "The mailbox is empty." },
        }
        h2 { "Reminders" }
        (reminder_rows(&details.reminders))
        h2 { "Effects not done" }
        (effect_rows(&details.effects))
        h2 { "Recent messages" }
        (message_rows(base, &details.recent_messages))
    };
    layout(base, &title, false, body)
}

/// One message; it refreshes itself every 2 s while it waits to run.
pub(super) fn message(base: &str, message: &MessageSummary) -> Markup {
    let waiting = message.status == "ready";
    let body = html! {
        table {
            tr {
                th { "actor" }
                td {
                    a href=(actor_link(base, &message.actor_type, &message.actor_id)) {
                        (message.actor_type) " " (message.actor_id)
                    }
                }
            }
            tr { th { "operation" } td { (message.operation) } }
            tr { th { "status" } td class={ "status-" (message.status) } id="status" { (message.status) } }
            tr { th { "attempts" } td { (message.attempts) } }
            tr { th { "last error" } td { (message.last_error.as_deref().unwrap_or("-")) } }
            tr { th { "enqueued" } td { (time(message.enqueued_at)) } }
            tr { th { "finished" } td { (maybe_time(message.finished_at)) } }
            @if let Some(retry) = message.retried_as {
                tr { th { "retried as" } td { a href={ (base) "/messages/" (retry) } { "#" (retry) } } }
            }
        }
        @if message.status == "dead" && message.retried_as.is_none() {
            (retry_button(base, message.message_id))
        }
    };
    let title = format!("Message #{}", message.message_id);
    layout(base, &title, waiting, body)
}

/// Dead letters matching the filter, with a form to change it and one to redrive them all.
pub(super) fn dead_letters(
    base: &str,
    [actor_type, operation, error]: [&str; 3],
    letters: &[DeadLetterSummary],
) -> Markup {
    let waiting = letters
        .iter()
        .filter(|letter| letter.retried_as.is_none())
        .count();
    let body = html! {
        form method="get" action={ (base) "/dead-letters" } {
            label { "type " input name="actor_type" value=(actor_type); }
            " "
            label { "operation " input name="operation" value=(operation); }
            " "
            label { "error contains " input name="error" value=(error); }
            " "
            button type="submit" { "Filter" }
        }
        (dead_letter_rows(base, letters))
        @if waiting > 0 {
            form method="post" action={ (base) "/dead-letters/redrive" } {
                input type="hidden" name="actor_type" value=(actor_type);
                input type="hidden" name="operation" value=(operation);
                input type="hidden" name="error" value=(error);
                button type="submit" { "Retry every matching dead letter (" (waiting) " shown)" }
            }
        }
    };
    layout(base, "Dead letters", false, body)
}

/// What a redrive enqueued.
pub(super) fn redriven(base: &str, redriven: &Redriven) -> Markup {
    let body = html! {
        p.notice { (redriven.retried) " dead letters enqueued again." }
        ul {
            @for id in &redriven.message_ids {
                li { a href={ (base) "/messages/" (id) } { "#" (id) } }
            }
        }
    };
    layout(base, "Redrive", false, body)
}

/// A page for an actor or message that is not there.
pub(super) fn missing(base: &str, what: &str) -> Markup {
    let body = html! { p { "There is no " (what) "." } };
    layout(base, "Not found", false, body)
}

/// An error page: the status and what to do.
pub(super) fn failure(status: StatusCode, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { (status) } style { (STYLE) } }
            body { h1 { (status) } p { (message) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments as an attacker would write them, as the administration API shows them.
    fn hostile_arguments() -> serde_json::Value {
        serde_json::json!({ "desk": "<script>alert(1)</script>\"><img src=x onerror=alert(2)>" })
    }

    /// The markup of `rows` holds the hostile arguments only escaped.
    fn assert_shown_as_text(rows: Markup) {
        let html = rows.into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn an_effects_and_a_dead_letters_arguments_are_shown_as_text() {
        let effect = EffectSummary {
            id: 7,
            effect_id: "e".to_owned(),
            actor_type: "Desk".to_owned(),
            actor_id: "d1".to_owned(),
            name: "notify".to_owned(),
            arguments: hostile_arguments(),
            status: crate::admin::EffectStatus::Dead,
            attempts: 1,
            available_at: DateTime::UNIX_EPOCH,
            last_error: None,
            created_at: DateTime::UNIX_EPOCH,
        };
        assert_shown_as_text(effect_rows(&[effect]));
        let letter = DeadLetterSummary {
            message_id: 8,
            request_id: "r".to_owned(),
            actor_type: "Desk".to_owned(),
            actor_id: "d1".to_owned(),
            operation: "fragile".to_owned(),
            arguments: hostile_arguments(),
            attempts: 1,
            error: "down".to_owned(),
            failed_at: None,
            retried_as: None,
        };
        assert_shown_as_text(dead_letter_rows("/ops", &[letter]));
    }

    #[test]
    fn links_keep_underscores_and_hyphens_and_encode_the_rest() {
        assert_eq!(
            actor_link("/ops", "seat_inventory", "show-1_a b/c"),
            "/ops/actors/seat_inventory/show-1_a%20b%2Fc"
        );
        assert_eq!(actor_link("/ops", "T", ".."), "/ops/actors/T/%7E%2E%2E");
    }
}
